// Runs the golden bundle through every CoreML package that contract.json lists, on the device (or
// the Simulator), and holds each to the gate the build wrote for it. This is the authoritative
// CoreML parity check that the Linux build cannot make (it only evaluates the MIL program in NumPy).
// The contract, golden reader, parity metrics and gate it calls are ArrcocCore's, which CoreTests
// compile and test on Linux against pipeline/stages/parity.py; this file needs CoreML and UIKit (device only).
import CoreML
import UIKit
import XCTest
@testable import ArrcocDemo

final class GoldenParityTests: XCTestCase {
    func testEveryPackageMeetsItsGate() async throws {
        let contract = try Contract.load()
        let golden = try GoldenBundle(contract: contract)
        XCTAssertFalse(contract.artifacts.isEmpty, "contract.json lists no artifacts")
        for (key, entry) in contract.artifacts.sorted(by: { $0.key < $1.key }) {
            // A lossless gate (one on relevance_max_abs) assumes float32 compute: run that package on
            // the CPU (the GPU and Neural Engine compute in fp16). Lossy ones run where CoreML puts them.
            let lossless = entry.gate.max["relevance_max_abs"] != nil
            let units: MLComputeUnits = lossless ? .cpuOnly : .all
            let model = try await RelevanceModel(contract: contract, artifact: key, computeUnits: units)
            // golden.bin's arrays are keyed by the tensor names the contract lists
            let expected = try golden.predictions(entry: entry)
            var got: [Prediction] = []
            for i in 0..<golden.count {  // each sample one photo at its own size (a whole non-square one too)
                let (rgb, height, width) = try golden.photo(i, entry.imageInput.name)
                let img = try RelevanceModel.photoArray(rgb, height: height, width: width, dtype: entry.imageInput.dtype)
                got.append(try model.predict(image: img, query: try golden.floats(i, entry.queryInput.name)))
            }
            var parity = Parity.measure(expected: expected, got: got, tie: entry.gate.tie_tolerance)
            parity.metrics["size_bytes"] = Double(entry.bytes)
            let failures = parity.failures(entry.gate)
            XCTAssertTrue(failures.isEmpty, "\(entry.file) (\(units == .cpuOnly ? "CPU" : "all units")): \(failures)")
            print("golden parity \(key): \(parity.metrics.sorted(by: { $0.key < $1.key }))")
        }
    }

    /// The app's own decode path (RelevanceModel.uprightRGB) on the bundled sample, a lossless PNG of
    /// the golden whole photo: byte for byte what PIL decoded on the build host.
    func testSamplePhotoDecodesToTheGoldenBytes() throws {
        let contract = try Contract.load()
        let golden = try GoldenBundle(contract: contract)
        let i = try golden.sampleIndex(named: contract.app.sample_golden)
        let entry = try XCTUnwrap(contract.artifacts[contract.app.default_artifact])
        let (expected, height, width) = try golden.photo(i, entry.imageInput.name)
        let image = try XCTUnwrap(UIImage(data: contract.checkedData(contract.app.sample_image)),
                                  "cannot read \(contract.app.sample_image)")
        let (got, h, w) = try RelevanceModel.uprightRGB(image)
        XCTAssertEqual([h, w], [height, width])
        XCTAssertTrue(got == expected, "decoded bytes differ from the golden photo")
    }

    func testPresetsMatchTheQueryWidth() throws {
        let contract = try Contract.load()
        for item in contract.presets.items {
            XCTAssertEqual(item.embedding.count, contract.model.query_dim, item.text)
        }
    }
}
