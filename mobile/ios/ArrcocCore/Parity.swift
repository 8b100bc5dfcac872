// The parity metrics and gate rule of pipeline/stages/parity.py, operation for operation, so a phone's
// numbers are the build's numbers: errors in Double from Float values (NumPy: float32 -> float64),
// the K-th score, the tie window and the weights' sum in Float, as NumPy computes those in float32.
// Foundation only: compiled and tested on Linux against pipeline/stages/parity.py (tests/test_ios.py).
import Foundation

struct Parity {
    var metrics: [String: Double] = [:]

    /// Per sample (overlap with the tie rule, strict overlap): a pick of `gotIdx` outside the
    /// reference's top-K still agrees when it is a tie at the K-th place, i.e. its reference score is
    /// within `tie` of the K-th score AND it replaces a reference pick itself within `tie` of it.
    static func topkOverlap(reference scores: [Float], refIdx: [Int], gotIdx: [Int], tie: Double) -> (Double, Double) {
        let k = refIdx.count
        let a = Set(refIdx), b = Set(gotIdx)
        let common = a.intersection(b).count
        let kth = scores.sorted(by: >)[k - 1]
        let window = Float(tie)
        let extra = b.subtracting(a).filter { $0 >= 0 && $0 < scores.count && scores[$0] >= kth - window }.count
        let dropped = a.subtracting(b).filter { scores[$0] <= kth + window }.count
        return (Double(common + min(extra, dropped)) / Double(k), Double(common) / Double(k))
    }

    /// expected/got: one Prediction per sample.
    static func measure(expected: [Prediction], got: [Prediction], tie: Double) -> Parity {
        var relMax = 0.0, relSum = 0.0, relN = 0, wMax = 0.0, wSum = 0.0, wN = 0, eMax = 0.0, eSum = 0.0, eN = 0
        var sumDev: Float = 0
        var overlaps: [Double] = [], stricts: [Double] = []
        for (e, g) in zip(expected, got) {
            for (x, y) in zip(e.relevance, g.relevance) { let d = abs(Double(y) - Double(x)); relMax = max(relMax, d); relSum += d; relN += 1 }
            for (x, y) in zip(e.weights, g.weights) { let d = abs(Double(y) - Double(x)); wMax = max(wMax, d); wSum += d; wN += 1 }
            for (x, y) in zip(e.evidence, g.evidence) { let d = abs(Double(y) - Double(x)); eMax = max(eMax, d); eSum += d; eN += 1 }
            sumDev = max(sumDev, abs(g.weights.reduce(Float(0), +) - 1))
            let (o, s) = topkOverlap(reference: e.relevance, refIdx: e.topk, gotIdx: g.topk, tie: tie)
            overlaps.append(o); stricts.append(s)
        }
        var p = Parity()
        p.metrics = [
            "samples": Double(got.count),
            "relevance_max_abs": relMax, "relevance_mean_abs": relSum / Double(max(relN, 1)),
            "weights_max_abs": wMax, "weights_mean_abs": wSum / Double(max(wN, 1)),
            "evidence_max_abs": eMax, "evidence_mean_abs": eSum / Double(max(eN, 1)),
            "topk_overlap_mean": overlaps.reduce(0, +) / Double(max(overlaps.count, 1)),
            "topk_overlap_min": overlaps.min() ?? 0,
            "topk_overlap_strict_mean": stricts.reduce(0, +) / Double(max(stricts.count, 1)),
            "weights_sum_max_dev": Double(sumDev),
        ]
        return p
    }

    /// The metrics that break `gate`, as pipeline/stages/parity.py's Gate.failures: an unmeasured metric fails.
    func failingMetrics(_ gate: GateSpec) -> [String] {
        let over = gate.max.filter { name, limit in !(metrics[name].map { $0.isFinite && $0 <= limit } ?? false) }
        let under = gate.min.filter { name, limit in !(metrics[name].map { $0.isFinite && $0 >= limit } ?? false) }
        return (Array(over.keys) + Array(under.keys)).sorted()
    }

    /// Gate failures as readable lines ("name=value > limit").
    func failures(_ gate: GateSpec) -> [String] {
        let failing = Set(failingMetrics(gate))
        func line(_ name: String, _ op: String, _ limit: Double) -> String {
            "\(name)=\(metrics[name].map { "\($0)" } ?? "unmeasured") \(op) \(limit)"
        }
        return gate.max.sorted(by: { $0.key < $1.key }).filter { failing.contains($0.key) }.map { line($0.key, ">", $0.value) }
            + gate.min.sorted(by: { $0.key < $1.key }).filter { failing.contains($0.key) }.map { line($0.key, "<", $0.value) }
    }
}
