// Loads a CoreML package named by contract.json, preprocesses photos per the contract and runs it.
// The shell around ArrcocCore (contract, golden reader, Prediction, parity, Upright): only what needs
// CoreML, UIKit or CoreGraphics is here, and none of it can be compiled off Apple's platforms.
import CoreML
import UIKit

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
        guard entry.queryInput.dtype == "float32" else {
            throw AppError.badContract("\(entry.queryInput.name) is \(entry.queryInput.dtype); the app feeds float32")
        }
        let q = try MLMultiArray(shape: [1, NSNumber(value: query.count)], dataType: .float32)
        q.withUnsafeMutableBytes { raw, strides in
            let dst = raw.bindMemory(to: Float.self)
            for (i, v) in query.enumerated() { dst[i * strides[1]] = v }
        }
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
            weights: try floats(array(entry.weightsOutput)),
            evidence: try floats(array(entry.evidenceOutput))
        )
    }

    /// Photo -> the `image` input per contract.preprocessing: the photo as decoded, upright
    /// (its orientation applied), at its own size, RGB with alpha dropped, [1,H,W,3]. No crop, no
    /// resize, no scaling: the package does arr-coc-0-1's resize itself. CoreML has no uint8 input,
    /// so each byte goes in as a value of the artifact's image dtype (contract.json: float16), exactly.
    static func preprocess(_ image: UIImage, contract: Contract, entry: ArtifactEntry) throws -> MLMultiArray {
        let p = contract.preprocessing
        guard p.layout == "NHWC" else { throw AppError.badContract("unsupported layout \(p.layout)") }
        guard let cg = image.cgImage else { throw AppError.badImage }
        guard min(cg.height, cg.width) >= p.min_side, max(cg.height, cg.width) <= p.max_side else {
            throw AppError.badContract("the photo is \(cg.width)x\(cg.height); the model takes \(p.min_side) to \(p.max_side) px per side")
        }
        let (rgb, height, width) = try uprightRGB(image)
        return try photoArray(rgb, height: height, width: width, dtype: entry.imageInput.dtype)
    }

    /// [1,H,W,3] MLMultiArray of the artifact's image dtype holding the bytes' values exactly
    /// (float16 holds every integer up to 2048), written through the array's own strides.
    static func photoArray(_ rgb: [UInt8], height: Int, width: Int, dtype: String) throws -> MLMultiArray {
        guard rgb.count == height * width * 3 else {
            throw AppError.badContract("\(rgb.count) photo bytes do not make [1,\(height),\(width),3]")
        }
        let shape = [1, height, width, 3].map { NSNumber(value: $0) }
        switch dtype {
        case "float16": return try fill(MLMultiArray(shape: shape, dataType: .float16), rgb, height, width) { Float16($0) }
        case "float32": return try fill(MLMultiArray(shape: shape, dataType: .float32), rgb, height, width) { Float($0) }
        default: throw AppError.badContract("image dtype \(dtype): the app hands over float16 or float32 (CoreML has no uint8 input)")
        }
    }

    private static func fill<T>(_ arr: MLMultiArray, _ rgb: [UInt8], _ height: Int, _ width: Int,
                                _ value: (UInt8) -> T) -> MLMultiArray {
        arr.withUnsafeMutableBytes { raw, strides in
            let dst = raw.bindMemory(to: T.self)
            var i = 0
            for y in 0..<height {
                for x in 0..<width {
                    for c in 0..<3 {
                        dst[y * strides[1] + x * strides[2] + c * strides[3]] = value(rgb[i])
                        i += 1
                    }
                }
            }
        }
        return arr
    }

    /// UIImage.Orientation -> its EXIF orientation (CGImagePropertyOrientation raw value).
    static let exifOrientation: [UIImage.Orientation: Int] = [
        .up: 1, .upMirrored: 2, .down: 3, .downMirrored: 4, .leftMirrored: 5, .right: 6, .rightMirrored: 7, .left: 8,
    ]

    /// The photo's pixels upright, as stored, RGB, alpha dropped: (bytes [H*W*3], H, W).
    /// The CGImage (the pixels as stored, before orientation) is drawn once, at its own pixel size,
    /// into an RGBA8 context of that size in its own colour space when that is RGB (no colour
    /// conversion, as PIL does none; grey, CMYK or indexed photos are converted to sRGB by
    /// CoreGraphics), with blend mode copy; then re-indexed upright and un-premultiplied by
    /// Upright.rgb (CoreGraphics bitmap contexts are always premultiplied: a fully transparent
    /// pixel's colour is lost and comes back black, where PIL keeps it).
    static func uprightRGB(_ image: UIImage) throws -> ([UInt8], Int, Int) {
        guard let cg = image.cgImage else { throw AppError.badImage }
        let sw = cg.width, sh = cg.height, stride = sw * 4
        var rgba = [UInt8](repeating: 0, count: stride * sh)
        let own = cg.colorSpace.flatMap { $0.model == .rgb ? $0 : nil }
        guard let space = own ?? CGColorSpace(name: CGColorSpace.sRGB) else { throw AppError.badImage }
        let drawn = rgba.withUnsafeMutableBytes { raw -> Bool in
            // bytes in memory: R, G, B, A (premultiplied)
            let info = CGImageAlphaInfo.premultipliedLast.rawValue | CGBitmapInfo.byteOrder32Big.rawValue
            guard let ctx = CGContext(data: raw.baseAddress, width: sw, height: sh, bitsPerComponent: 8,
                                      bytesPerRow: stride, space: space, bitmapInfo: info) else { return false }
            ctx.setBlendMode(.copy)
            ctx.interpolationQuality = .none
            ctx.draw(cg, in: CGRect(x: 0, y: 0, width: sw, height: sh))
            return true
        }
        guard drawn else { throw AppError.badImage }
        return Upright.rgb(fromRGBA: rgba, height: sh, width: sw, bytesPerRow: stride,
                           orientation: exifOrientation[image.imageOrientation] ?? 1)
    }
}

/// A [1, N] output (float32 / float16 / double) -> [Float], read by index so any strides hold.
func floats(_ a: MLMultiArray) -> [Float] {
    let n = a.shape.last?.intValue ?? 0
    return (0..<n).map { a[[0, NSNumber(value: $0)]].floatValue }
}

/// A [1, K] output (int32 on CoreML) -> [Int].
func ints(_ a: MLMultiArray) -> [Int] {
    let n = a.shape.last?.intValue ?? 0
    return (0..<n).map { a[[0, NSNumber(value: $0)]].intValue }
}
