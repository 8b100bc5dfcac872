// The golden bundle (golden.json + golden.bin, written by the build) and the parity metrics of
// pipeline/parity.py, so the phone can re-check a model against the gate in contract.json.
import Foundation

struct GoldenArray: Decodable {
    let dtype: String
    let shape: [Int]
    let offset: Int
    let bytes: Int
}

/// One batch-1 run of the bundle (photos differ in size: two 16G crops and a whole non-square
/// photo), its arrays keyed by the contract's tensor names.
struct GoldenSample: Decodable {
    let name: String
    let arrays: [String: GoldenArray]
}

struct GoldenIndex: Decodable {
    let samples: [GoldenSample]
}

struct GoldenBundle {
    let index: GoldenIndex
    let data: Data

    init(contract: Contract, bundle: Bundle = .main) throws {
        let json = try Data(contentsOf: contract.resourceURL(contract.golden.json, bundle: bundle))
        index = try JSONDecoder().decode(GoldenIndex.self, from: json)
        data = try Data(contentsOf: contract.resourceURL(contract.golden.bin, bundle: bundle))
    }

    var count: Int { index.samples.count }

    /// Little-endian float32 array of sample `i` by name (iOS devices are little-endian, as golden.bin is).
    func floats(_ i: Int, _ name: String) throws -> [Float] {
        guard let a = index.samples[i].arrays[name], a.dtype == "float32" else { throw AppError.badContract("golden \(name)") }
        return data.subdata(in: a.offset..<(a.offset + a.bytes)).withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
    }

    /// Sample `i`'s uint8 [1,H,W,3] photo: (bytes, height, width).
    func photo(_ i: Int, _ name: String) throws -> ([UInt8], Int, Int) {
        guard let a = index.samples[i].arrays[name], a.dtype == "uint8", a.shape.count == 4 else {
            throw AppError.badContract("golden \(name)")
        }
        return ([UInt8](data.subdata(in: a.offset..<(a.offset + a.bytes))), a.shape[1], a.shape[2])
    }

    func ints(_ i: Int, _ name: String) throws -> [Int] {
        guard let a = index.samples[i].arrays[name] else { throw AppError.badContract("golden \(name)") }
        let raw = data.subdata(in: a.offset..<(a.offset + a.bytes))
        switch a.dtype {
        case "int32": return raw.withUnsafeBytes { $0.bindMemory(to: Int32.self).map { Int($0) } }
        case "int64": return raw.withUnsafeBytes { $0.bindMemory(to: Int64.self).map { Int($0) } }
        default: throw AppError.badContract("golden \(name) has dtype \(a.dtype)")
        }
    }

    func shape(_ i: Int, _ name: String) -> [Int] { index.samples[i].arrays[name]?.shape ?? [] }
}

/// Same definitions as pipeline/parity.py: abs errors, and top-K set overlap with the tie rule.
struct Parity {
    var metrics: [String: Double] = [:]

    static func topkOverlap(reference scores: [Float], refIdx: [Int], gotIdx: [Int], tie: Double) -> (Double, Double) {
        let k = refIdx.count
        let a = Set(refIdx), b = Set(gotIdx)
        let common = a.intersection(b).count
        let kth = Double(scores.sorted(by: >)[k - 1])
        let extra = b.subtracting(a).filter { $0 >= 0 && $0 < scores.count && Double(scores[$0]) >= kth - tie }.count
        let dropped = a.subtracting(b).filter { Double(scores[$0]) <= kth + tie }.count
        return (Double(common + min(extra, dropped)) / Double(k), Double(common) / Double(k))
    }

    /// expected/got: per sample (relevance, topk, weights).
    static func measure(expected: [Prediction], got: [Prediction], tie: Double) -> Parity {
        var relMax = 0.0, relSum = 0.0, relN = 0, wMax = 0.0, wSum = 0.0, wN = 0, sumDev = 0.0
        var overlaps: [Double] = [], stricts: [Double] = []
        for (e, g) in zip(expected, got) {
            for (x, y) in zip(e.relevance, g.relevance) { let d = abs(Double(x) - Double(y)); relMax = max(relMax, d); relSum += d; relN += 1 }
            for (x, y) in zip(e.weights, g.weights) { let d = abs(Double(x) - Double(y)); wMax = max(wMax, d); wSum += d; wN += 1 }
            sumDev = max(sumDev, abs(g.weights.reduce(0) { $0 + Double($1) } - 1))
            let (o, s) = topkOverlap(reference: e.relevance, refIdx: e.topk, gotIdx: g.topk, tie: tie)
            overlaps.append(o); stricts.append(s)
        }
        var p = Parity()
        p.metrics = [
            "samples": Double(got.count),
            "relevance_max_abs": relMax, "relevance_mean_abs": relSum / Double(max(relN, 1)),
            "weights_max_abs": wMax, "weights_mean_abs": wSum / Double(max(wN, 1)),
            "topk_overlap_mean": overlaps.reduce(0, +) / Double(max(overlaps.count, 1)),
            "topk_overlap_min": overlaps.min() ?? 0,
            "topk_overlap_strict_mean": stricts.reduce(0, +) / Double(max(stricts.count, 1)),
            "weights_sum_max_dev": sumDev,
        ]
        return p
    }

    /// Gate failures as pipeline/parity.py's Gate.failures: an unmeasured metric fails.
    func failures(_ gate: GateSpec) -> [String] {
        var out: [String] = []
        for (name, limit) in gate.max.sorted(by: { $0.key < $1.key }) {
            guard let v = metrics[name], v.isFinite, v <= limit else { out.append("\(name)=\(metrics[name].map { "\($0)" } ?? "unmeasured") > \(limit)"); continue }
        }
        for (name, limit) in gate.min.sorted(by: { $0.key < $1.key }) {
            guard let v = metrics[name], v.isFinite, v >= limit else { out.append("\(name)=\(metrics[name].map { "\($0)" } ?? "unmeasured") < \(limit)"); continue }
        }
        return out
    }
}
