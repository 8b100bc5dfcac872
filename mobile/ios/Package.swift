// swift-tools-version:5.9
// The app's Foundation-only core (ArrcocCore: contract, golden reader, Prediction, parity metrics and
// gate, EXIF re-index, tokenizer), its XCTest suite (CoreTests) and the tokenizer's command-line
// runner (TokenizeCLI, for `invoke app-tokenize`; not in the app), buildable without Xcode: `swift test` here
// on a Mac, or on Linux (targets/ios/app.py runs it in `invoke build --target ios`). The SwiftUI /
// CoreML shell (ArrcocDemo/) and the on-device tests (Tests/) are built by project.yml (XcodeGen),
// which compiles ArrcocCore's files into the app target.
import PackageDescription

let package = Package(
    name: "ArrcocCore",
    platforms: [.iOS(.v17), .macOS(.v13)],
    products: [.library(name: "ArrcocCore", targets: ["ArrcocCore"]),
               .executable(name: "arrcoc-tokenize", targets: ["arrcoc-tokenize"])],
    targets: [
        .target(name: "ArrcocCore", path: "ArrcocCore"),
        // `invoke app-tokenize --app ios` (targets/app_tokenize.py): the Tokenizer on a text file's lines
        .executableTarget(name: "arrcoc-tokenize", dependencies: ["ArrcocCore"], path: "TokenizeCLI"),
        .testTarget(name: "CoreTests", dependencies: ["ArrcocCore"], path: "CoreTests"),
    ]
)
