// Loads a CoreML package named by contract.json, preprocesses photos per the contract and runs it.
import CoreML
import UIKit

struct Prediction {
    let relevance: [Float]      // num_patches scores in [0, 1], row-major (row * grid + col)
    let topk: [Int]             // top_k patch indices
    let weights: [Float]        // information, perspectival, participatory
}

final class RelevanceModel {
    let contract: Contract
    let entry: ArtifactEntry
    private let model: MLModel

    /// Compiles the .mlpackage the contract names (on device, once per launch) and loads it.
    init(contract: Contract, artifact key: String? = nil, computeUnits: MLComputeUnits = .all,
         bundle: Bundle = .main) async throws {
        let chosen = key ?? contract.app.default_artifact
        guard let entry = contract.artifacts[chosen] else {
            throw AppError.badContract("no artifact '\(chosen)' (have \(contract.artifacts.keys.sorted()))")
        }
        let packageURL = try contract.resourceURL(entry.file, bundle: bundle)
        let compiled = try await MLModel.compileModel(at: packageURL)
        let config = MLModelConfiguration()
        config.computeUnits = computeUnits
        self.model = try MLModel(contentsOf: compiled, configuration: config)
        self.contract = contract
        self.entry = entry
        try checkDescription()
    }

    /// The loaded model must expose exactly the tensor names the contract lists.
    private func checkDescription() throws {
        let inputs = Set(model.modelDescription.inputDescriptionsByName.keys)
        let outputs = Set(model.modelDescription.outputDescriptionsByName.keys)
        let wantIn = Set(entry.inputs.map(\.name)), wantOut = Set(entry.outputs.map(\.name))
        guard inputs == wantIn, outputs == wantOut else {
            throw AppError.badContract("model I/O \(inputs.sorted()) -> \(outputs.sorted()) differs from \(wantIn.sorted()) -> \(wantOut.sorted())")
        }
    }

    /// One image tensor [1,3,S,S] and one query [1,D] -> outputs (batch 1).
    func predict(image: MLMultiArray, query: [Float]) throws -> Prediction {
        let q = try MLMultiArray(shape: [1, NSNumber(value: query.count)], dataType: .float32)
        let qp = q.dataPointer.bindMemory(to: Float.self, capacity: query.count)
        for (i, v) in query.enumerated() { qp[i] = v }
        let features = try MLDictionaryFeatureProvider(dictionary: [
            entry.imageInput.name: MLFeatureValue(multiArray: image),
            entry.queryInput.name: MLFeatureValue(multiArray: q),
        ])
        let out = try model.prediction(from: features)
        func array(_ spec: TensorSpec) throws -> MLMultiArray {
            guard let a = out.featureValue(for: spec.name)?.multiArrayValue else {
                throw AppError.badContract("output '\(spec.name)' missing from the prediction")
            }
            return a
        }
        return Prediction(
            relevance: try floats(array(entry.relevanceOutput)),
            topk: try ints(array(entry.topkOutput)),
            weights: try floats(array(entry.weightsOutput))
        )
    }

    /// Photo -> [1,3,S,S] float32 per contract.preprocessing: orientation applied, centre square
    /// crop, resize to S x S, alpha composited on white, RGB, value * scale (no mean/std).
    static func preprocess(_ image: UIImage, contract: Contract) throws -> MLMultiArray {
        let p = contract.preprocessing
        guard p.layout == "NCHW", p.color == "RGB", p.dtype == "float32", p.resize.count == 2 else {
            throw AppError.badContract("unsupported preprocessing \(p.layout) \(p.color) \(p.dtype)")
        }
        let side = p.resize[0]
        let pixels = try squareRGBA(image, side: side)
        let arr = try MLMultiArray(shape: [1, 3, NSNumber(value: side), NSNumber(value: side)], dataType: .float32)
        let dst = arr.dataPointer.bindMemory(to: Float.self, capacity: 3 * side * side)
        let plane = side * side
        let scale = Float(p.scale)
        for i in 0..<plane {
            for c in 0..<3 { dst[c * plane + i] = Float(pixels[i * 4 + c]) * scale }
        }
        return arr
    }

    /// Draws the photo (UIKit applies its orientation) centre-cropped to a side x side RGBA
    /// buffer on a white background, so transparency is composited on white.
    static func squareRGBA(_ image: UIImage, side: Int) throws -> [UInt8] {
        let w = image.size.width, h = image.size.height
        guard w > 0, h > 0 else { throw AppError.badImage }
        let crop = min(w, h)
        let format = UIGraphicsImageRendererFormat()
        format.scale = 1
        format.opaque = true
        let scale = CGFloat(side) / crop
        let rendered = UIGraphicsImageRenderer(size: CGSize(width: side, height: side), format: format).image { ctx in
            UIColor.white.setFill()
            ctx.fill(CGRect(x: 0, y: 0, width: side, height: side))
            ctx.cgContext.interpolationQuality = .high
            image.draw(in: CGRect(x: -(w - crop) / 2 * scale, y: -(h - crop) / 2 * scale, width: w * scale, height: h * scale))
        }
        guard let cg = rendered.cgImage else { throw AppError.badImage }
        var buffer = [UInt8](repeating: 0, count: side * side * 4)
        let space = CGColorSpace(name: CGColorSpace.sRGB)!
        let ok = buffer.withUnsafeMutableBytes { raw -> Bool in
            guard let bctx = CGContext(data: raw.baseAddress, width: side, height: side, bitsPerComponent: 8,
                                       bytesPerRow: side * 4, space: space,
                                       bitmapInfo: CGImageAlphaInfo.noneSkipLast.rawValue) else { return false }
            bctx.draw(cg, in: CGRect(x: 0, y: 0, width: side, height: side))
            return true
        }
        guard ok else { throw AppError.badImage }
        return buffer
    }
}

/// MLMultiArray (float32 / float16 / double) -> [Float].
func floats(_ a: MLMultiArray) -> [Float] {
    (0..<a.count).map { a[$0].floatValue }
}

/// MLMultiArray (int32 on CoreML) -> [Int].
func ints(_ a: MLMultiArray) -> [Int] {
    (0..<a.count).map { a[$0].intValue }
}
