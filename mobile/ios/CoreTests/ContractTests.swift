// contract.json and the golden bundle exactly as the build wrote them, read by the app's own code.
import XCTest
@testable import ArrcocCore

final class ContractTests: XCTestCase {
    func testContractDecodesAndNamesEveryTensor() throws {
        let contract = try Fixtures.contract()
        XCTAssertFalse(contract.artifacts.isEmpty, "contract.json lists no artifacts")
        XCTAssertNotNil(contract.artifacts[contract.app.default_artifact], "default_artifact is not an artifact")
        XCTAssertEqual(contract.model.num_patches, contract.model.grid * contract.model.grid)
        XCTAssertEqual(contract.model.weights_order.count, 3)
        XCTAssertEqual(contract.preprocessing.layout, "NHWC")
        XCTAssertLessThanOrEqual(contract.preprocessing.min_side, contract.preprocessing.max_side)
        for (key, entry) in contract.artifacts {
            XCTAssertEqual(entry.inputs.count, 2, key)
            XCTAssertEqual(entry.outputs.count, 4, key)
            // [1,H,W,3]: batch, the photo's own height and width, 3 channels
            XCTAssertEqual(entry.imageInput.shape.map { $0.size }, [nil, nil, nil, 3], key)
            XCTAssertEqual(entry.relevanceOutput.shape.last?.size, contract.model.num_patches, key)
            XCTAssertEqual(entry.topkOutput.shape.last?.size, contract.model.top_k, key)
            XCTAssertEqual(entry.weightsOutput.shape.last?.size, 3, key)
            XCTAssertEqual(entry.evidenceOutput.shape.last?.size, contract.model.evidence_names.count, key)
            XCTAssertEqual(entry.queryInput.shape.last?.size, contract.model.query_dim, key)
            XCTAssertEqual(entry.topkOutput.dtype, entry.topk_dtype, key)
            XCTAssertGreaterThan(entry.bytes, 0, key)
            XCTAssertFalse(entry.gate.max.isEmpty && entry.gate.min.isEmpty, key)
        }
        for item in contract.presets.items {
            XCTAssertEqual(item.embedding.count, contract.model.query_dim, item.text)
        }
        XCTAssertNoThrow(try contract.resourceURL(contract.app.sample_image, folder: Fixtures.resources))
    }

    func testEveryBundleFileIsTheOneContractJsonNames() throws {
        let contract = try Fixtures.contract()
        for name in [contract.golden.json, contract.golden.bin, contract.app.sample_image] {
            XCTAssertNotNil(contract.files[name], "contract.json's files do not name \(name)")
        }
        // the build's test copy of Resources/ leaves the .mlpackage folders out (CoreML does not run here)
        let here = contract.files.keys.sorted().filter { !($0.split(separator: "/").first ?? "").hasSuffix(".mlpackage") }
        XCTAssertFalse(here.isEmpty)
        for name in here {
            XCTAssertNoThrow(try contract.checkedData(name, folder: Fixtures.resources, sha256: Fixtures.sha256), name)
        }
    }

    func testABundleMixedFromTwoBuildsIsRefused() throws {
        // a copy into Resources/ killed half way leaves files of another build: their bytes differ
        let contract = try Fixtures.contract()
        let name = contract.golden.json
        let bytes = try Data(contentsOf: contract.resourceURL(name, folder: Fixtures.resources))
        var changed = bytes
        changed[changed.startIndex] = changed[changed.startIndex] &+ 1
        for other in [changed, bytes + Data([32])] {
            XCTAssertThrowsError(try contract.checkBundleFile(name, data: other, sha256: Fixtures.sha256)) { error in
                XCTAssertTrue(error.localizedDescription.contains(name), error.localizedDescription)
            }
        }
        XCTAssertThrowsError(try contract.checkBundleFile("not-in-the-bundle.bin", data: bytes, sha256: Fixtures.sha256))
        XCTAssertNoThrow(try contract.checkBundleFile(name, data: bytes, sha256: Fixtures.sha256))
    }

    func testGoldenBundleReadsEverySampleAtItsOwnSize() throws {
        let contract = try Fixtures.contract()
        let golden = try Fixtures.golden(contract)
        let entry = try XCTUnwrap(contract.artifacts[contract.app.default_artifact])
        XCTAssertGreaterThan(golden.count, 0)
        var sizes: [[Int]] = []
        for i in 0..<golden.count {
            let (photo, height, width) = try golden.photo(i, entry.imageInput.name)
            XCTAssertEqual(photo.count, height * width * 3)
            XCTAssertTrue((contract.preprocessing.min_side...contract.preprocessing.max_side).contains(min(height, width)))
            XCTAssertEqual(try golden.floats(i, entry.queryInput.name).count, contract.model.query_dim)
            let p = try golden.prediction(i, entry: entry)
            XCTAssertEqual(p.relevance.count, contract.model.num_patches)
            XCTAssertEqual(p.topk.count, contract.model.top_k)
            XCTAssertEqual(p.weights.count, 3)
            XCTAssertTrue(p.relevance.allSatisfy { (0...1).contains($0) })
            XCTAssertTrue(p.topk.allSatisfy { (0..<contract.model.num_patches).contains($0) })
            XCTAssertEqual(Double(p.weights.reduce(0, +)), 1, accuracy: 1e-5)
            sizes.append([height, width])
        }
        // the bundled sample is the golden whole photo, non-square
        let whole = try golden.sampleIndex(named: contract.app.sample_golden)
        XCTAssertNotEqual(sizes[whole][0], sizes[whole][1])
        // the reference against itself: no error, full overlap, every gate met (size aside)
        let expected = try golden.predictions(entry: entry)
        for (key, art) in contract.artifacts {
            let parity = Parity.measure(expected: expected, got: expected, tie: art.gate.tie_tolerance)
            XCTAssertEqual(parity.metrics["relevance_max_abs"], 0, key)
            XCTAssertEqual(parity.metrics["topk_overlap_min"], 1, key)
            var gate = art.gate.max
            gate["size_bytes"] = nil
            XCTAssertEqual(parity.failingMetrics(GateSpec(max: gate, min: art.gate.min, tie_tolerance: art.gate.tie_tolerance)), [], key)
        }
        try Fixtures.report("golden", sizes)
    }
}
