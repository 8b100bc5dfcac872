// Typed queries (issue 38): contract.json's typed_text, the length rules a query's ids are held to,
// and arr-coc-0-1's token-embedding mean as plain Swift (TokenMeanEncoder, reading the build's
// query_encoder.tokenmean). The CoreML encoder for all-MiniLM-L6-v2 is in the shell
// (ArrcocDemo/QueryEncoder.swift). Foundation only: compiled and tested on Linux too (CoreTests/
// TypedQueryTests.swift, against the build's own numbers: targets/ios/encoder.py).
import Foundation

/// typed_text.tokenizer: the build's tokenizer.json and how the encoder wants its ids.
struct TypedTokenizerSpec: Decodable {
    let file: String
    let bytes: Int
    let sha256: String
    let kind: String
    let add_special_tokens: Bool
    let max_length: Int?
}

/// typed_text.encoder: token ids -> the query embedding, as a CoreML package (minilm) or a table
/// file TokenMeanEncoder reads (qwen-token-mean).
struct TypedEncoderSpec: Decodable {
    let file: String
    let bytes: Int
    let sha256: String
    let kind: String
    let variant: String
    let format: String
    let runtime: String
    let inputs: [TensorSpec]
    let output: TensorSpec
    let min_length: Int
    let max_length: Int?
}

/// contract.json's typed_text: what a typed query runs through, or why the app takes presets only.
struct TypedText: Decodable {
    let supported: Bool
    let why: String?
    let tokenizer: TypedTokenizerSpec?
    let encoder: TypedEncoderSpec?

    private enum Keys: String, CodingKey { case supported, why, tokenizer, encoder }

    /// Unsupported: `encoder` may be a sentence saying where one would come from, and is not read.
    init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        supported = try c.decode(Bool.self, forKey: .supported)
        why = try c.decodeIfPresent(String.self, forKey: .why)
        tokenizer = supported ? try c.decode(TypedTokenizerSpec.self, forKey: .tokenizer) : nil
        encoder = supported ? try c.decode(TypedEncoderSpec.self, forKey: .encoder) : nil
    }
}

enum TypedQueryError: LocalizedError, Equatable {
    case empty
    case invisible
    case tooLong(tokens: Int, max: Int)

    var errorDescription: String? {
        switch self {
        case .empty: return "the query has no tokens: type a question"
        case .invisible: return "the query has no visible characters (only invisible ones such as zero-width spaces): type a question"
        case let .tooLong(tokens, max): return "the query has \(tokens) tokens; the encoder takes at most \(max): type a shorter one"
        }
    }
}

/// The rules a typed query's ids meet before the encoder sees them (contract.json typed_text).
enum TypedQuery {
    /// A query with something to read: one scalar that is not white space, a format character (zero-width
    /// spaces and joiners, a BOM, direction marks) or a control character. The tokenizer drops all of
    /// those, so such a query would ask the model about nothing (predict refuses it too).
    static func checkText(_ text: String) throws {
        let visible = text.unicodeScalars.contains { scalar in
            !scalar.properties.isWhitespace && ![.format, .control].contains(scalar.properties.generalCategory)
        }
        guard visible else { throw TypedQueryError.invisible }
    }

    /// `ids` as the encoder takes them, or why not: at least min_length (an empty query is refused),
    /// at most max_length when the encoder has one.
    static func encoderIds(_ spec: TypedEncoderSpec, _ ids: [Int]) throws -> [Int] {
        guard ids.count >= spec.min_length else { throw TypedQueryError.empty }
        if let max = spec.max_length, ids.count > max { throw TypedQueryError.tooLong(tokens: ids.count, max: max) }
        return ids
    }

    /// The tokenizer read from the bundle must be the kind and length the contract says the encoder expects.
    static func checkTokenizer(_ spec: TypedTokenizerSpec, _ tokenizer: Tokenizer) throws {
        guard tokenizer.kind == spec.kind, tokenizer.maxLength == spec.max_length else {
            throw AppError.badContract("\(spec.file) reads as a \(tokenizer.kind) tokenizer cutting at "
                + "\(tokenizer.maxLength.map(String.init) ?? "none"); contract.json says \(spec.kind) cutting at "
                + "\(spec.max_length.map(String.init) ?? "none")")
        }
    }

    /// The tokenizer the contract names, from a resources folder.
    static func tokenizer(_ contract: Contract, folder: URL) throws -> Tokenizer {
        guard contract.typed_text.supported, let spec = contract.typed_text.tokenizer else {
            throw AppError.badContract("typed queries are not supported by this build: \(contract.typed_text.why ?? "no reason given")")
        }
        let tokenizer = try Tokenizer(json: Data(contentsOf: contract.resourceURL(spec.file, folder: folder)),
                                      maxLength: spec.max_length)
        try checkTokenizer(spec, tokenizer)
        return tokenizer
    }
}

/// arr-coc-0-1's query encoder in the form the text-encoder stage chose (targets/qwen_encoder.py):
/// q = mean(coords[ids]) basis + sqrt(rho) tail, rho = (1/n^2) sum over pairs of equal ids of
/// energy. Computed in Double and rounded to Float once (targets/ios/encoder.py table_query does
/// the same in NumPy; CoreTests hold the two within 1e-6 of max |q|).
struct TokenMeanEncoder {
    struct ArrayEntry: Decodable {
        let dtype: String
        let shape: [Int]
        let offset: Int
        let bytes: Int
    }

    private struct Header: Decodable {
        let format: Int
        let kind: String
        let arrays: [String: ArrayEntry]
    }

    static let magic = Array("ARRCOCTM".utf8)
    let rows: Int  // V: ids 0..<rows
    let dims: Int  // m: coordinates per row
    let width: Int  // D: the embedding's width
    private let basis: [Float]  // [m, D]
    private let coords: [UInt16]  // [V, m], IEEE half bits
    private let energy: [Float]  // [V]
    private let tail: [Float]  // [D]

    init(data: Data) throws {
        let bytes = [UInt8](data)
        guard bytes.count >= 12, Array(bytes[0..<8]) == Self.magic else {
            throw AppError.badContract("the query encoder file is not a token-mean table (no ARRCOCTM header)")
        }
        let n = Int(UInt32(bytes[8]) | UInt32(bytes[9]) << 8 | UInt32(bytes[10]) << 16 | UInt32(bytes[11]) << 24)
        guard 12 + n <= bytes.count else { throw AppError.badContract("the token-mean table's header is cut short") }
        let header = try JSONDecoder().decode(Header.self, from: Data(bytes[12..<(12 + n)]))
        guard header.format == 1, header.kind == "qwen-token-mean" else {
            throw AppError.badContract("token-mean table format \(header.format) \(header.kind): this app reads format 1")
        }
        func entry(_ name: String, _ dtype: String, rank: Int) throws -> ArrayEntry {
            guard let e = header.arrays[name], e.dtype == dtype, e.shape.count == rank, e.offset >= 0,
                  e.offset + e.bytes <= bytes.count, e.bytes == e.shape.reduce(dtype == "float16" ? 2 : 4, *) else {
                throw AppError.badContract("the token-mean table has no \(dtype) array '\(name)' of rank \(rank)")
            }
            return e
        }
        let b = try entry("basis", "float32", rank: 2), c = try entry("coords", "float16", rank: 2)
        let e = try entry("energy", "float32", rank: 1), t = try entry("tail", "float32", rank: 1)
        guard c.shape[1] == b.shape[0], e.shape[0] == c.shape[0], t.shape[0] == b.shape[1] else {
            throw AppError.badContract("the token-mean table's arrays do not fit together")
        }
        (rows, dims, width) = (c.shape[0], b.shape[0], b.shape[1])
        basis = Self.words(bytes, b, as: UInt32.self).map { Float(bitPattern: $0) }
        coords = Self.words(bytes, c, as: UInt16.self)
        energy = Self.words(bytes, e, as: UInt32.self).map { Float(bitPattern: $0) }
        tail = Self.words(bytes, t, as: UInt32.self).map { Float(bitPattern: $0) }
    }

    /// Little-endian words of an array, copied out (no alignment assumed).
    private static func words<T: FixedWidthInteger>(_ bytes: [UInt8], _ a: ArrayEntry, as _: T.Type) -> [T] {
        var out = [T](repeating: 0, count: a.bytes / MemoryLayout<T>.size)
        out.withUnsafeMutableBytes { dst in
            bytes.withUnsafeBytes { src in dst.copyMemory(from: UnsafeRawBufferPointer(rebasing: src[a.offset..<(a.offset + a.bytes)])) }
        }
        return out.map { T(littleEndian: $0) }
    }

    /// IEEE 754 half -> Double, exactly (subnormals, infinities and NaN included).
    static func half(_ h: UInt16) -> Double {
        let sign: Double = h & 0x8000 != 0 ? -1 : 1
        let exponent = Int(h >> 10 & 0x1f), fraction = Double(h & 0x3ff)
        switch exponent {
        case 0: return sign * fraction * 0x1p-24
        case 31: return fraction == 0 ? sign * .infinity : .nan
        default: return sign * (1 + fraction / 1024) * Double(sign: .plus, exponent: exponent - 15, significand: 1)
        }
    }

    /// One query's embedding, [D] floats, for ids the Tokenizer gave (the raw text's, no special tokens).
    func encode(_ ids: [Int]) throws -> [Float] {
        guard !ids.isEmpty else { throw TypedQueryError.empty }
        if let bad = ids.first(where: { $0 < 0 || $0 >= rows }) {
            throw AppError.badContract("token id \(bad) is outside the encoder's table (0..<\(rows))")
        }
        var mean = [Double](repeating: 0, count: dims)
        var counts: [Int: Int] = [:]
        for id in ids {
            for j in 0..<dims { mean[j] += Self.half(coords[id * dims + j]) }
            counts[id, default: 0] += 1
        }
        let n = Double(ids.count)
        var rho = 0.0
        for id in ids { rho += Double(counts[id]!) * Double(energy[id]) }
        rho /= n * n
        let scale = max(rho, 0).squareRoot()
        var q = [Double](repeating: 0, count: width)
        for j in 0..<dims {
            let coordinate = mean[j] / n
            for d in 0..<width { q[d] += coordinate * Double(basis[j * width + d]) }
        }
        return (0..<width).map { Float(q[$0] + scale * Double(tail[$0])) }
    }
}
