// Verdict.swift against arrcoc_edge/relevance/evidence.py: the confidence and the verdict line for
// the golden bundle's own evidence (and shifted copies, and the extremes) through a calibration of
// the test's own coefficients, the cells the answer rests on, and no calibration said as such.
// targets/ios/app.py writes Python's numbers into core_checks.json (mobile_contract.verdict_cases).
import XCTest
@testable import ArrcocCore

final class VerdictTests: XCTestCase {
    private func prediction(_ evidence: [Float]) -> Prediction {
        Prediction(relevance: [], topk: [], weights: [], evidence: evidence)
    }

    func testConfidenceAndVerdictArePythons() throws {
        let contract = try Fixtures.contract()
        let verdict = try Fixtures.checks(contract).0.verdict
        let calibration = try verdict.calibration.checked(names: contract.model.evidence_names)
        var seen = Set<Bool>()
        for (i, c) in verdict.cases.enumerated() {
            let p = prediction(c.evidence)
            let confidence = try XCTUnwrap(Verdict.confidence(p, calibration))
            XCTAssertEqual(confidence, c.confidence, accuracy: 1e-9, "case \(i)")
            XCTAssertEqual(Verdict.text(p, calibration), c.text, "case \(i)")
            seen.insert(confidence >= Verdict.standsOut)
        }
        XCTAssertEqual(seen, [true, false], "both verdicts are exercised")
    }

    func testNoCalibrationIsSaidNotGuessed() throws {
        let contract = try Fixtures.contract()
        let verdict = try Fixtures.checks(contract).0.verdict
        let p = prediction([0.6, 0.5, 0.4, 0.7])
        XCTAssertNil(Verdict.confidence(p, nil))
        XCTAssertEqual(Verdict.text(p, nil), verdict.unknown_text)
        XCTAssertTrue(Verdict.text(p, nil).contains(Verdict.noCalibration))
        // the golden bundle holds the evidence output the verdict reads
        let entry = try XCTUnwrap(contract.artifacts[contract.app.default_artifact])
        XCTAssertEqual(try Fixtures.golden(contract).prediction(0, entry: entry).evidence.count, contract.model.evidence_names.count)
    }

    func testACalibrationOfOtherEvidenceIsRefused() throws {
        let contract = try Fixtures.contract()
        let calibration = try Fixtures.checks(contract).0.verdict.calibration
        XCTAssertThrowsError(try calibration.checked(names: ["a", "b", "c", "d"]))
    }

    func testTheOutlinedCellsAreTheStrongestOfTheTopK() throws {
        let contract = try Fixtures.contract()
        let strongest = try Fixtures.checks(contract).0.verdict.strongest
        XCTAssertFalse(strongest.isEmpty)
        for (i, s) in strongest.enumerated() {
            let p = Prediction(relevance: s.relevance, topk: s.topk, weights: [], evidence: [])
            let cells = Verdict.strongestCells(p, numPatches: contract.model.num_patches, share: contract.model.strongest_share)
            XCTAssertEqual(cells, s.cells, "sample \(i)")
        }
    }
}
