// swift-tools-version:5.9
// The app's Foundation-only core (ArrcocCore: contract, golden reader, Prediction, parity metrics and
// gate, EXIF re-index) and its XCTest suite (CoreTests), buildable without Xcode: `swift test` here
// on a Mac, or on Linux (targets/ios_app.py runs it in `invoke build --target ios`). The SwiftUI /
// CoreML shell (ArrcocDemo/) and the on-device tests (Tests/) are built by project.yml (XcodeGen),
// which compiles ArrcocCore's files into the app target.
import PackageDescription

let package = Package(
    name: "ArrcocCore",
    platforms: [.iOS(.v17), .macOS(.v13)],
    products: [.library(name: "ArrcocCore", targets: ["ArrcocCore"])],
    targets: [
        .target(name: "ArrcocCore", path: "ArrcocCore"),
        .testTarget(name: "CoreTests", dependencies: ["ArrcocCore"], path: "CoreTests"),
    ]
)
