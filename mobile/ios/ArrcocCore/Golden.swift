// The golden bundle (golden.json + golden.bin, written by the build: pipeline/stages/golden.py
// write_bundle / write_array_bundle), read without any ML framework so the phone can re-check a
// model against the gate in contract.json. Foundation only: compiled and tested on Linux too.
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

    /// The golden files the contract names, each checked against its `files` (BundleCheck.swift).
    init(contract: Contract, bundle: Bundle = .main) throws {
        try self.init(json: contract.checkedData(contract.golden.json, bundle: bundle),
                      bin: contract.checkedData(contract.golden.bin, bundle: bundle))
    }

    init(contract: Contract, folder: URL, sha256: SHA256Hasher? = BundleCheck.platformSHA256) throws {
        try self.init(json: contract.checkedData(contract.golden.json, folder: folder, sha256: sha256),
                      bin: contract.checkedData(contract.golden.bin, folder: folder, sha256: sha256))
    }

    /// Any file in the bundle format (index JSON with `samples`, raw little-endian arrays).
    init(json: Data, bin: Data) throws {
        self.init(index: try JSONDecoder().decode(GoldenIndex.self, from: json), data: bin)
    }

    init(index: GoldenIndex, data: Data) {
        self.index = index
        self.data = data
    }

    var count: Int { index.samples.count }

    private func array(_ i: Int, _ name: String, dtype: String) throws -> GoldenArray {
        guard let a = index.samples[i].arrays[name], a.dtype == dtype, a.offset >= 0,
              a.offset + a.bytes <= data.count else {
            throw AppError.badContract("golden sample \(i): no \(dtype) array '\(name)' inside golden.bin")
        }
        return a
    }

    /// Little-endian values of `a`, copied out (Data's slices carry no alignment guarantee).
    private func values<T: FixedWidthInteger>(_ a: GoldenArray, as _: T.Type) -> [T] {
        let n = a.bytes / MemoryLayout<T>.size
        var out = [T](repeating: 0, count: n)
        let range = a.offset..<(a.offset + n * MemoryLayout<T>.size)
        out.withUnsafeMutableBytes { dst in
            data.withUnsafeBytes { src in dst.copyMemory(from: UnsafeRawBufferPointer(rebasing: src[range])) }
        }
        return out.map { T(littleEndian: $0) }
    }

    func floats(_ i: Int, _ name: String) throws -> [Float] {
        values(try array(i, name, dtype: "float32"), as: UInt32.self).map { Float(bitPattern: $0) }
    }

    /// Sample `i`'s uint8 [1,H,W,3] photo: (bytes, height, width).
    func photo(_ i: Int, _ name: String) throws -> ([UInt8], Int, Int) {
        let a = try array(i, name, dtype: "uint8")
        guard a.shape.count == 4 else { throw AppError.badContract("golden \(name) is not [1,H,W,3]") }
        return (values(a, as: UInt8.self), a.shape[1], a.shape[2])
    }

    func ints(_ i: Int, _ name: String) throws -> [Int] {
        guard let a = index.samples[i].arrays[name] else { throw AppError.badContract("golden \(name)") }
        switch a.dtype {
        case "int32": return values(try array(i, name, dtype: "int32"), as: Int32.self).map { Int($0) }
        case "int64": return values(try array(i, name, dtype: "int64"), as: Int64.self).map { Int($0) }
        default: throw AppError.badContract("golden \(name) has dtype \(a.dtype)")
        }
    }

    func shape(_ i: Int, _ name: String) -> [Int] { index.samples[i].arrays[name]?.shape ?? [] }

    /// Sample `i`'s outputs under the tensor names `entry` lists (the reference, in golden.bin).
    func prediction(_ i: Int, entry: ArtifactEntry) throws -> Prediction {
        Prediction(relevance: try floats(i, entry.relevanceOutput.name), topk: try ints(i, entry.topkOutput.name),
                   weights: try floats(i, entry.weightsOutput.name), evidence: try floats(i, entry.evidenceOutput.name))
    }

    func predictions(entry: ArtifactEntry) throws -> [Prediction] {
        try (0..<count).map { try prediction($0, entry: entry) }
    }

    func sampleIndex(named name: String) throws -> Int {
        guard let i = index.samples.firstIndex(where: { $0.name == name }) else {
            throw AppError.badContract("golden bundle has no sample \(name)")
        }
        return i
    }
}
