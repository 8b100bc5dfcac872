// A typed query through the app: ArrcocCore's Tokenizer (the build's tokenizer.json) -> the query
// encoder contract.json's typed_text names -> the embedding RelevanceModel takes, each step timed.
// The encoder is a CoreML package for all-MiniLM-L6-v2 (int32 ids [1, tokens] -> [1, 384]) or, for
// arr-coc-0-1's token-embedding mean, ArrcocCore's TokenMeanEncoder on the build's table file.
// Only the CoreML half is here: TypedText.swift (contract, length rules, TokenMeanEncoder) is
// Foundation-only and tested by CoreTests in every `invoke build --target ios`.
import CoreML
import Foundation

final class QueryEncoder {
    struct Encoded {
        let ids: [Int]
        let embedding: [Float]
        let tokenizeMs: Double
        let encodeMs: Double
    }

    private enum Backend {
        case coreml(MLModel)
        case table(TokenMeanEncoder)
    }

    let spec: TypedEncoderSpec
    private let tokenizer: Tokenizer
    private let backend: Backend

    private init(spec: TypedEncoderSpec, tokenizer: Tokenizer, backend: Backend) {
        self.spec = spec
        self.tokenizer = tokenizer
        self.backend = backend
    }

    /// The tokenizer and encoder the contract names (the package compiled on device, once per launch).
    static func open(contract: Contract, computeUnits: MLComputeUnits = .all, bundle: Bundle = .main) async throws -> QueryEncoder {
        guard let folder = bundle.resourceURL?.appendingPathComponent(contract.app.resources_folder) else {
            throw AppError.missingResource(contract.app.resources_folder)
        }
        let tokenizer = try TypedQuery.tokenizer(contract, folder: folder)
        let spec = try contract.typed_text.encoder ?? { throw AppError.badContract("typed_text names no encoder") }()
        guard spec.output.shape.last?.size == contract.model.query_dim else {
            throw AppError.badContract("the query encoder gives \(spec.output.shape), the model takes \(contract.model.query_dim) values")
        }
        let url = try contract.resourceURL(spec.file, folder: folder)
        switch spec.kind {
        case "qwen-token-mean":
            return QueryEncoder(spec: spec, tokenizer: tokenizer, backend: .table(try TokenMeanEncoder(data: Data(contentsOf: url))))
        case "minilm":
            let config = MLModelConfiguration()
            config.computeUnits = computeUnits
            let model = try MLModel(contentsOf: try await MLModel.compileModel(at: url), configuration: config)
            return QueryEncoder(spec: spec, tokenizer: tokenizer, backend: .coreml(model))
        default:
            throw AppError.badContract("typed_text encoder kind \(spec.kind): this app runs minilm or qwen-token-mean")
        }
    }

    /// text -> ids (refused when invisible, too short or too long for the encoder) -> embedding [query_dim].
    func encode(_ text: String) throws -> Encoded {
        try TypedQuery.checkText(text)
        var start = Date()
        let ids = try TypedQuery.encoderIds(spec, tokenizer.encode(text))
        let tokenizeMs = Date().timeIntervalSince(start) * 1000
        start = Date()
        let embedding: [Float]
        switch backend {
        case let .table(table):
            embedding = try table.encode(ids)
        case let .coreml(model):
            embedding = try run(model, ids)
        }
        return Encoded(ids: ids, embedding: embedding, tokenizeMs: tokenizeMs, encodeMs: Date().timeIntervalSince(start) * 1000)
    }

    /// One unpadded query, int32 ids [1, tokens], through the package; its [1, D] output as floats.
    private func run(_ model: MLModel, _ ids: [Int]) throws -> [Float] {
        let input = spec.inputs[0]
        guard input.dtype == "int32" else { throw AppError.badContract("\(input.name) is \(input.dtype); the app feeds int32 ids") }
        let array = try MLMultiArray(shape: [1, NSNumber(value: ids.count)], dataType: .int32)
        array.withUnsafeMutableBytes { raw, strides in
            let dst = raw.bindMemory(to: Int32.self)
            for (i, id) in ids.enumerated() { dst[i * strides[1]] = Int32(id) }
        }
        let out = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: [input.name: MLFeatureValue(multiArray: array)]))
        guard let result = out.featureValue(for: spec.output.name)?.multiArrayValue else {
            throw AppError.badContract("output '\(spec.output.name)' missing from the query encoder's prediction")
        }
        return floats(result)
    }
}
