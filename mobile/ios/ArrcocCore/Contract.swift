// contract.json, written by `invoke build --target ios` (targets/shared/mobile_contract.py + targets/ios/target.py).
// Property names are the JSON keys, spelled exactly as in the file (snake_case), so a key the build
// renames breaks decoding loudly instead of silently; CoreTests decodes the contract.json the build
// writes (tests/test_ios.py runs them). Foundation only: compiled and tested on Linux too.
import Foundation

struct TensorSpec: Decodable {
    let name: String
    let dtype: String
    let shape: [ShapeDim]
}

/// A shape entry: a fixed size, or the name of a dynamic dimension ("batch"; for the image also
/// "height" and "width": the photo's own).
enum ShapeDim: Decodable {
    case fixed(Int)
    case dynamic(String)

    init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if let n = try? c.decode(Int.self) { self = .fixed(n) } else { self = .dynamic(try c.decode(String.self)) }
    }

    var size: Int? { if case .fixed(let n) = self { return n } else { return nil } }
}

struct GateSpec: Decodable {
    let max: [String: Double]
    let min: [String: Double]
    let tie_tolerance: Double
}

struct ArtifactEntry: Decodable {
    let file: String
    let variant: String
    let bytes: Int
    let sha256: String
    let topk_dtype: String
    let max_batch: Int
    let gate: GateSpec
    /// Ordered as the model's inputs: [image, query].
    let inputs: [TensorSpec]
    /// Ordered as the model's outputs: [relevance, topk_indices, weights, evidence].
    let outputs: [TensorSpec]

    var imageInput: TensorSpec { inputs[0] }
    var queryInput: TensorSpec { inputs[1] }
    var relevanceOutput: TensorSpec { outputs[0] }
    var topkOutput: TensorSpec { outputs[1] }
    var weightsOutput: TensorSpec { outputs[2] }
    var evidenceOutput: TensorSpec { outputs[3] }
}

struct ModelInfo: Decodable {
    let image_size: Int
    let grid: Int
    let num_patches: Int
    let top_k: Int
    let query_dim: Int
    let weights_order: [String]
    /// The evidence output's values, in order (signature.EVIDENCE_NAMES).
    let evidence_names: [String]
    /// The share of the grid whose strongest cells the answer rests on (signature.STRONGEST_SHARE).
    let strongest_share: Double
}

/// What the app hands over: the photo as decoded, [1,H,W,3] RGB (no crop, resize or scaling), each
/// side min_side...max_side; the value type is the artifact's image dtype (CoreML: float16).
struct Preprocessing: Decodable {
    let input: String
    let layout: String
    let dtype: String
    let min_side: Int
    let max_side: Int
}

struct PresetItem: Decodable, Hashable {
    let text: String
    let embedding: [Float]
}

struct Presets: Decodable {
    let source: String?
    let items: [PresetItem]
    let note: String?
}

struct GoldenFiles: Decodable {
    let json: String
    let bin: String
}

struct AppInfo: Decodable {
    let default_artifact: String
    /// The bundled photo, a lossless PNG of the golden sample `sample_golden`.
    let sample_image: String
    let sample_golden: String
    let resources_folder: String
    /// Outputs and photos for CoreTests (parity cases, EXIF orientations) with the build's numbers.
    let core_checks: GoldenFiles?
}

struct Contract: Decodable {
    let version: Int
    let model: ModelInfo
    let preprocessing: Preprocessing
    let artifacts: [String: ArtifactEntry]
    let golden: GoldenFiles
    let presets: Presets
    /// Typed queries: the tokenizer and encoder the build shipped, or why there are none (TypedText.swift).
    let typed_text: TypedText
    let app: AppInfo
    /// Every file of the bundle but contract.json, by path in Resources/ (BundleCheck.swift).
    let files: [String: BundleFile]
    /// The published folder's calibration (calibration.json), or nil when the build had none.
    let calibration: Calibration?

    /// The calibration, checked against the model's evidence names (nil: none in this folder).
    func checkedCalibration() throws -> Calibration? {
        try calibration?.checked(names: model.evidence_names)
    }

    /// The folder reference that `invoke build --target ios` fills (see project.yml).
    static let resourcesFolder = "Resources"
    static let fileName = "contract"

    /// The app's bundled resources folder (Resources/ inside the app bundle).
    static func resources(bundle: Bundle = .main) throws -> URL {
        guard let url = bundle.resourceURL?.appendingPathComponent(resourcesFolder) else {
            throw AppError.missingResource(resourcesFolder)
        }
        return url
    }

    static func load(bundle: Bundle = .main) throws -> Contract {
        try load(folder: resources(bundle: bundle))
    }

    /// contract.json in a resources folder (the app's, or the one the build wrote).
    static func load(folder: URL) throws -> Contract {
        let url = folder.appendingPathComponent("\(fileName).json")
        guard FileManager.default.fileExists(atPath: url.path) else {
            throw AppError.missingResource("\(resourcesFolder)/\(fileName).json: run `invoke build --target ios` first")
        }
        return try JSONDecoder().decode(Contract.self, from: Data(contentsOf: url))
    }

    /// URL of a file the contract names, inside the bundled resources folder.
    func resourceURL(_ name: String, bundle: Bundle = .main) throws -> URL {
        guard let folder = bundle.resourceURL?.appendingPathComponent(app.resources_folder) else {
            throw AppError.missingResource(app.resources_folder)
        }
        return try resourceURL(name, folder: folder)
    }

    func resourceURL(_ name: String, folder: URL) throws -> URL {
        let url = folder.appendingPathComponent(name)
        guard FileManager.default.fileExists(atPath: url.path) else { throw AppError.missingResource(name) }
        return url
    }
}

enum AppError: LocalizedError {
    case missingResource(String)
    case badContract(String)
    case badImage

    var errorDescription: String? {
        switch self {
        case .missingResource(let what): return "missing resource: \(what)"
        case .badContract(let what): return "contract.json: \(what)"
        case .badImage: return "could not read that image"
        }
    }
}
