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

    /// One photo [1,H,W,3] (preprocess / photoArray) and one query [1,D] -> outputs (batch 1).
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

    /// Photo -> the `image` input per contract.preprocessing: the photo as decoded, upright
    /// (UIKit's orientation applied), at its own size, RGB with alpha dropped, [1,H,W,3]. No crop,
    /// no resize, no scaling: the package does arr-coc-0-1's resize itself. CoreML has no uint8
    /// input, so each byte goes in as a float16 of the same value (the artifact's image dtype).
    static func preprocess(_ image: UIImage, contract: Contract, entry: ArtifactEntry) throws -> MLMultiArray {
        let p = contract.preprocessing
        guard p.layout == "NHWC", entry.imageInput.dtype == "float16" else {
            throw AppError.badContract("unsupported input \(p.layout) \(entry.imageInput.dtype)")
        }
        let (rgb, height, width) = try uprightRGB(image)
        guard min(height, width) >= p.min_side, max(height, width) <= p.max_side else {
            throw AppError.badContract("the photo is \(width)x\(height); the model takes \(p.min_side) to \(p.max_side) px per side")
        }
        return try photoArray(rgb, height: height, width: width)
    }

    /// [1,H,W,3] float16 MLMultiArray holding the bytes' values exactly (float16 holds 0...2048).
    static func photoArray(_ rgb: [UInt8], height: Int, width: Int) throws -> MLMultiArray {
        let shape = [1, height, width, 3].map { NSNumber(value: $0) }
        let arr = try MLMultiArray(shape: shape, dataType: .float16)
        let dst = arr.dataPointer.bindMemory(to: Float16.self, capacity: rgb.count)
        for i in 0..<rgb.count { dst[i] = Float16(rgb[i]) }
        return arr
    }

    /// The photo's pixels upright, as stored: drawn at scale 1 into a context of its own pixel size
    /// and its own colour space (no colour conversion, as PIL does none), then un-premultiplied so
    /// that RGB is the stored colour (exact for opaque pixels; a fully transparent pixel's colour
    /// is lost by CoreGraphics' premultiplication and comes back black).
    static func uprightRGB(_ image: UIImage) throws -> ([UInt8], Int, Int) {
        guard let source = image.cgImage else { throw AppError.badImage }
        let turned = [.left, .right, .leftMirrored, .rightMirrored].contains(image.imageOrientation)
        let width = turned ? source.height : source.width, height = turned ? source.width : source.height
        let format = UIGraphicsImageRendererFormat()
        format.scale = 1
        let upright = image.imageOrientation == .up ? source : UIGraphicsImageRenderer(
            size: CGSize(width: width, height: height), format: format).image { _ in
                image.draw(in: CGRect(x: 0, y: 0, width: width, height: height))  // orientation only: no scaling
            }.cgImage
        guard let cg = upright else { throw AppError.badImage }
        var rgba = [UInt8](repeating: 0, count: width * height * 4)
        let space = cg.colorSpace ?? CGColorSpace(name: CGColorSpace.sRGB)!
        let ok = rgba.withUnsafeMutableBytes { raw -> Bool in
            guard let ctx = CGContext(data: raw.baseAddress, width: width, height: height, bitsPerComponent: 8,
                                      bytesPerRow: width * 4, space: space,
                                      bitmapInfo: CGImageAlphaInfo.premultipliedLast.rawValue) else { return false }
            ctx.draw(cg, in: CGRect(x: 0, y: 0, width: width, height: height))
            return true
        }
        guard ok else { throw AppError.badImage }
        var rgb = [UInt8](repeating: 0, count: width * height * 3)
        for i in 0..<(width * height) {
            let a = Int(rgba[i * 4 + 3])
            for c in 0..<3 {
                let v = Int(rgba[i * 4 + c])
                rgb[i * 3 + c] = UInt8(a == 255 || a == 0 ? v : min(255, (v * 255 + a / 2) / a))
            }
        }
        return (rgb, height, width)
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
