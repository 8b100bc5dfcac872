// Where CoreTests find what the build wrote, and where they leave their numbers for it.
//   ARRCOC_IOS_RESOURCES  contract.json, golden bundle, core_checks (default: ArrcocDemo/Resources,
//                         which `invoke build --target ios` fills, so `swift test` works on a Mac too)
//   ARRCOC_IOS_REPORT     a folder: each test writes its measured numbers there as JSON, which the
//                         build compares with pipeline/stages/parity.py and PIL (unset: nothing written)
import Foundation
import XCTest
@testable import ArrcocCore

enum Fixtures {
    static let env = ProcessInfo.processInfo.environment

    static var resources: URL {
        if let path = env["ARRCOC_IOS_RESOURCES"] { return URL(fileURLWithPath: path) }
        // mobile/ios/CoreTests/Fixtures.swift -> mobile/ios/ArrcocDemo/Resources
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("ArrcocDemo").appendingPathComponent(Contract.resourcesFolder)
    }

    static func contract() throws -> Contract { try Contract.load(folder: resources) }

    static func golden(_ contract: Contract) throws -> GoldenBundle {
        try GoldenBundle(contract: contract, folder: resources, sha256: sha256)
    }

    /// The platform's SHA-256 where it has one, else coreutils' sha256sum (Linux: no CryptoKit).
    static let sha256: SHA256Hasher = BundleCheck.platformSHA256 ?? { data in
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("arrcoc-sha256-\(UUID().uuidString)")
        try data.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
        process.arguments = [file.path]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let out = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0, let line = String(data: out, encoding: .utf8),
              let hex = line.split(separator: " ").first else {
            throw AppError.badContract("sha256sum failed on \(file.path)")
        }
        return String(hex)
    }

    /// core_checks.json (index + the build's numbers) and the bytes of core_checks.bin.
    static func checks(_ contract: Contract) throws -> (CoreChecks, Data) {
        let files = try XCTUnwrap(contract.app.core_checks, "contract.json names no core_checks: rebuild with `invoke build --target ios`")
        let json = try Data(contentsOf: contract.resourceURL(files.json, folder: resources))
        let bin = try Data(contentsOf: contract.resourceURL(files.bin, folder: resources))
        return (try JSONDecoder().decode(CoreChecks.self, from: json), bin)
    }

    static func report<T: Encodable>(_ name: String, _ value: T) throws {
        guard let dir = env["ARRCOC_IOS_REPORT"] else { return }
        let url = URL(fileURLWithPath: dir).appendingPathComponent("\(name).json")
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try encoder.encode(value).write(to: url)
    }
}

/// core_checks.json (targets/ios/app.py write_core_checks): arrays in core_checks.bin.
struct CoreChecks: Decodable {
    struct ParityCase: Decodable {
        let name: String
        let tie_tolerance: Double
        /// Per golden sample, the "got" outputs keyed by tensor name.
        let samples: [GoldenSample]
        /// pipeline/stages/parity.py's parity_metrics for the same arrays.
        let python_metrics: [String: Double]
        /// Per artifact of the contract: the metrics its gate (size aside) fails, per Gate.failures.
        let python_failing: [String: [String]]
    }

    struct ExifCase: Decodable {
        let orientation: Int
        /// the name of PIL's exif_transpose result in `arrays`
        let upright: String
    }

    /// Python's confidences and verdict lines (mobile_contract.verdict_cases) for VerdictTests.
    struct VerdictCases: Decodable {
        struct Case: Decodable {
            let evidence: [Float]
            let confidence: Double
            let text: String
        }
        struct Strongest: Decodable {
            let relevance: [Float]
            let topk: [Int]
            let cells: [Int]
        }
        let calibration: Calibration
        let cases: [Case]
        let unknown_text: String
        let strongest: [Strongest]
    }

    let parity_cases: [ParityCase]
    let verdict: VerdictCases
    /// `stored` (uint8 [H,W,3]) and PIL's upright photo per orientation.
    let exif_arrays: [String: GoldenArray]
    let exif: [ExifCase]
}
