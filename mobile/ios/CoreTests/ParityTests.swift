// Parity metrics and gate verdicts on "got" sets the build wrote (core_checks): a CoreML package's
// outputs from the build host's reference evaluator, and deliberately perturbed outputs (a swap at
// the K-th place inside and outside the tie window, a relevance offset beyond the gate). Each must
// give pipeline/stages/parity.py's numbers for the same arrays and the same pass/fail for every gate.
import XCTest
@testable import ArrcocCore

struct MeasuredCase: Encodable {
    let name: String
    let metrics: [String: Double]
    let failing: [String: [String]]
}

final class ParityTests: XCTestCase {
    /// Means are summed in a different order than NumPy's pairwise sum (a few ulp of float64 apart);
    /// everything else is computed by the same operations in the same precision, so it must be equal.
    static let summed: Set<String> = ["relevance_mean_abs", "weights_mean_abs"]

    func testMetricsAndVerdictsEqualPipelineParity() throws {
        let contract = try Fixtures.contract()
        let golden = try Fixtures.golden(contract)
        let entry = try XCTUnwrap(contract.artifacts[contract.app.default_artifact])
        let expected = try golden.predictions(entry: entry)
        let (checks, bin) = try Fixtures.checks(contract)
        XCTAssertGreaterThanOrEqual(checks.parity_cases.count, 4)
        var measured: [MeasuredCase] = []
        for c in checks.parity_cases {
            let got = try GoldenBundle(index: GoldenIndex(samples: c.samples), data: bin).predictions(entry: entry)
            let parity = Parity.measure(expected: expected, got: got, tie: c.tie_tolerance)
            XCTAssertEqual(Set(parity.metrics.keys), Set(c.python_metrics.keys), c.name)
            for (name, want) in c.python_metrics {
                let have = try XCTUnwrap(parity.metrics[name], "\(c.name): \(name)")
                if Self.summed.contains(name) {
                    XCTAssertEqual(have, want, accuracy: 1e-12 * abs(want), "\(c.name): \(name)")
                } else {
                    XCTAssertEqual(have, want, "\(c.name): \(name)")
                }
            }
            var failing: [String: [String]] = [:]
            for (key, art) in contract.artifacts {
                var limits = art.gate.max
                limits["size_bytes"] = nil  // the file's size is not what these outputs test
                failing[key] = parity.failingMetrics(GateSpec(max: limits, min: art.gate.min, tie_tolerance: c.tie_tolerance))
                XCTAssertEqual(failing[key], c.python_failing[key].map { $0.sorted() }, "\(c.name) against the \(key) gate")
            }
            measured.append(MeasuredCase(name: c.name, metrics: parity.metrics, failing: failing))
        }
        // the gate is exercised both ways: some case passes every gate, some fails one
        XCTAssertTrue(measured.contains { $0.failing.values.allSatisfy(\.isEmpty) })
        XCTAssertTrue(measured.contains { $0.failing.values.contains { !$0.isEmpty } })
        try Fixtures.report("parity", measured)
    }

    /// The tie rule on a fixed example: one swap at the K-th place counts only inside the window.
    func testTieRuleCountsOnlySwapsAtTheKthPlace() {
        let scores: [Float] = [0.9, 0.8, 0.5, 0.4995, 0.1]
        let ref = [0, 1, 2]
        XCTAssertEqual(Parity.topkOverlap(reference: scores, refIdx: ref, gotIdx: [0, 1, 3], tie: 1e-3).0, 1)
        XCTAssertEqual(Parity.topkOverlap(reference: scores, refIdx: ref, gotIdx: [0, 1, 3], tie: 1e-4).0, 2.0 / 3)
        XCTAssertEqual(Parity.topkOverlap(reference: scores, refIdx: ref, gotIdx: [0, 2, 4], tie: 1e-3).0, 2.0 / 3)
        XCTAssertEqual(Parity.topkOverlap(reference: scores, refIdx: ref, gotIdx: [0, 1, 3], tie: 1e-3).1, 2.0 / 3)
    }

    func testAnUnmeasuredMetricFailsTheGate() {
        let gate = GateSpec(max: ["relevance_max_abs": 1e-3, "size_bytes": 10], min: ["topk_overlap_min": 1], tie_tolerance: 1e-3)
        var p = Parity()
        p.metrics = ["relevance_max_abs": 0, "topk_overlap_min": 1]
        XCTAssertEqual(p.failingMetrics(gate), ["size_bytes"])
        p.metrics["relevance_max_abs"] = .nan
        XCTAssertEqual(p.failingMetrics(gate), ["relevance_max_abs", "size_bytes"])
    }
}
