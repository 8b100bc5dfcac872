// contract.json, written by `invoke build --target android` (targets/shared/mobile_contract.py + targets/android/target.py).
// It is the ONLY asset name the app knows: every other file (the .pte programs, the golden bundle, the
// sample photo) and every tensor name, shape, dtype and gate is read from it. Keys are spelled exactly
// as in the file (snake_case) and read with org.json's get* calls, so a key the build renames fails
// loudly: the JVM tests (app/src/test, ContractTest) parse the contract the build has just written.
// Plain Kotlin + org.json, no Android class: the part that touches the APK is Assets.kt.
package org.arrcoc.demo

import org.json.JSONArray
import org.json.JSONObject
import java.io.InputStream
import java.security.MessageDigest

/** One tensor of an artifact's I/O table. `shape` holds null for a dynamic dimension (the batch;
 *  for `image` also the photo's height and width). */
data class TensorSpec(val name: String, val dtype: String, val shape: List<Int?>) {
    /** The shape with the dynamic dimensions set, in order, to [dims] (batch first). */
    fun shapeFor(vararg dims: Int): LongArray {
        var next = 0
        return shape.map { (it ?: dims[next++]).toLong() }.toLongArray()
    }
    val numelPerSample: Int get() = shape.drop(1).filterNotNull().fold(1) { a, b -> a * b }
}

/** Limits as pipeline/stages/parity.py's Gate: metric <= max[name], metric >= min[name]. */
data class GateSpec(val max: Map<String, Double>, val min: Map<String, Double>, val tieTolerance: Double)

data class ArtifactEntry(
    val key: String,
    val file: String,
    val variant: String,
    val bytes: Long,
    val sha256: String,
    val topkDtype: String,
    val maxBatch: Int,
    val gate: GateSpec,
    /** Ordered as the program's inputs: [image, query]. */
    val inputs: List<TensorSpec>,
    /** Ordered as the program's outputs: [relevance, topk_indices, weights, evidence]. */
    val outputs: List<TensorSpec>,
    /** A second method of the .pte for photos of exactly image_size x image_size (no resize, the
     *  same numbers bit for bit, faster), or null when the file holds only `forward`. */
    val squareMethod: String? = null,
) {
    val imageInput get() = inputs[0]
    val queryInput get() = inputs[1]
    val relevanceOutput get() = outputs[0]
    val topkOutput get() = outputs[1]
    val weightsOutput get() = outputs[2]
    /** How strongly the query matched [1, 4] (model.evidence_names), before any min-max. */
    val evidenceOutput get() = outputs[3]
}

data class ModelInfo(
    val imageSize: Int,
    val grid: Int,
    val numPatches: Int,
    val topK: Int,
    val queryDim: Int,
    val weightsOrder: List<String>,
    /** The evidence output's values, in order (signature.EVIDENCE_NAMES). */
    val evidenceNames: List<String>,
    /** The share of the grid whose strongest cells the answer rests on (signature.STRONGEST_SHARE). */
    val strongestShare: Double,
)

/** What the app hands over: the photo as decoded (uint8 [1,H,W,3]); no crop, resize or scaling. */
data class Preprocessing(
    val input: String,
    val alpha: String,
    val layout: String,
    val dtype: String,
    val minSide: Int,
    val maxSide: Int,
)

class Preset(val text: String, val embedding: FloatArray)

data class Presets(val source: String?, val items: List<Preset>, val note: String?)

data class GoldenFiles(val json: String, val bin: String)

/** sampleImage: the bundled photo; sampleGolden: the golden sample it is (same bytes once decoded). */
data class AppInfo(val defaultArtifact: String, val sampleImage: String, val sampleGolden: String)

/** typed_text.tokenizer: the build's tokenizer.json and how the encoder wants its ids. */
data class TokenizerSpec(
    val file: String,
    val bytes: Long,
    val sha256: String,
    /** "wordpiece" (all-MiniLM-L6-v2) or "bpe-bytelevel" (Qwen3): Tokenizer.kind must say the same. */
    val kind: String,
    val addSpecialTokens: Boolean,
    /** Where the tokenizer cuts (MiniLM: 256, [SEP] kept last); null: it never cuts. */
    val maxLength: Int?,
)

/** typed_text.encoder: the query encoder .pte, token ids -> the query embedding. */
data class EncoderSpec(
    val file: String,
    val bytes: Long,
    val sha256: String,
    val kind: String,
    val method: String,
    /** int64 ids: [1, tokens] (MiniLM) or [tokens] (arr-coc-0-1's token mean). */
    val input: TensorSpec,
    /** float32 [1, query_dim]. */
    val output: TensorSpec,
    val minLength: Int,
    val maxLength: Int,
)

/** contract.json's typed_text: what a typed query runs through, or why the app takes presets only. */
/** One file of the bundle as contract.json's `files` names it: its size and content. */
data class BundleFile(val bytes: Long, val sha256: String)

data class TypedText(val supported: Boolean, val why: String?, val tokenizer: TokenizerSpec?, val encoder: EncoderSpec?)

class Contract(
    val version: Int,
    val model: ModelInfo,
    val preprocessing: Preprocessing,
    val artifacts: Map<String, ArtifactEntry>,
    val golden: GoldenFiles,
    val presets: Presets,
    val app: AppInfo,
    val typedText: TypedText,
    /** Every file of the bundle but contract.json, by asset name: what checkBundleFile holds a file to. */
    val files: Map<String, BundleFile>,
    /** The published folder's calibration (calibration.json), or null when the build had none. */
    val calibration: Calibration? = null,
) {
    companion object {
        /** The one asset name the app knows; everything else comes from inside it. */
        const val FILE_NAME = "contract.json"
        const val SUPPORTED_VERSION = 1

        fun parse(text: String): Contract {
            val o = JSONObject(text)
            val version = o.getInt("version")
            if (version != SUPPORTED_VERSION) throw ContractException("contract version $version, app reads $SUPPORTED_VERSION")
            val m = o.getJSONObject("model")
            val model = ModelInfo(
                imageSize = m.getInt("image_size"),
                grid = m.getInt("grid"),
                numPatches = m.getInt("num_patches"),
                topK = m.getInt("top_k"),
                queryDim = m.getInt("query_dim"),
                weightsOrder = m.getJSONArray("weights_order").strings(),
                evidenceNames = m.getJSONArray("evidence_names").strings(),
                strongestShare = m.getDouble("strongest_share"),
            )
            val p = o.getJSONObject("preprocessing")
            val pre = Preprocessing(
                input = p.getString("input"),
                alpha = p.getString("alpha"),
                layout = p.getString("layout"),
                dtype = p.getString("dtype"),
                minSide = p.getInt("min_side"),
                maxSide = p.getInt("max_side"),
            )
            val arts = o.getJSONObject("artifacts")
            val artifacts = arts.keys().asSequence().sorted().associateWith { key -> artifact(key, arts.getJSONObject(key)) }
            val g = o.getJSONObject("golden")
            val ps = o.getJSONObject("presets")
            val items = ps.getJSONArray("items")
            val presets = Presets(
                source = if (ps.isNull("source")) null else ps.getString("source"),
                items = (0 until items.length()).map { i ->
                    val item = items.getJSONObject(i)
                    Preset(item.getString("text"), item.getJSONArray("embedding").floats())
                },
                note = if (ps.isNull("note")) null else ps.getString("note"),
            )
            val a = o.getJSONObject("app")
            val contract = Contract(
                version, model, pre, artifacts,
                GoldenFiles(g.getString("json"), g.getString("bin")),
                presets,
                AppInfo(a.getString("default_artifact"), a.getString("sample_image"), a.getString("sample_golden")),
                typedText(o.getJSONObject("typed_text"), model.queryDim),
                bundleFiles(o.getJSONObject("files")),
                o.optJSONObject("calibration")?.let { Calibration.parse(it, model.evidenceNames) },
            )
            if (contract.app.defaultArtifact !in artifacts) {
                throw ContractException("default_artifact ${contract.app.defaultArtifact} is not among the artifacts")
            }
            return contract
        }

        private fun bundleFiles(o: JSONObject): Map<String, BundleFile> =
            o.keys().asSequence().sorted().associateWith { name ->
                val f = o.getJSONObject(name)
                BundleFile(f.getLong("bytes"), f.getString("sha256"))
            }

        private fun artifact(key: String, e: JSONObject): ArtifactEntry {
            val gate = e.getJSONObject("gate")
            return ArtifactEntry(
                key = key,
                file = e.getString("file"),
                variant = e.getString("variant"),
                bytes = e.getLong("bytes"),
                sha256 = e.getString("sha256"),
                topkDtype = e.getString("topk_dtype"),
                maxBatch = e.getInt("max_batch"),
                gate = GateSpec(
                    max = gate.getJSONObject("max").doubles(),
                    min = gate.getJSONObject("min").doubles(),
                    tieTolerance = gate.getDouble("tie_tolerance"),
                ),
                inputs = tensors(e.getJSONArray("inputs")),
                outputs = tensors(e.getJSONArray("outputs")),
                squareMethod = if (e.has("square_method") && !e.isNull("square_method")) e.getString("square_method") else null,
            )
        }

        private fun typedText(t: JSONObject, queryDim: Int): TypedText {
            if (!t.getBoolean("supported")) return TypedText(false, t.optString("why"), null, null)
            val tok = t.getJSONObject("tokenizer")
            val enc = t.getJSONObject("encoder")
            val tokenizer = TokenizerSpec(
                file = tok.getString("file"),
                bytes = tok.getLong("bytes"),
                sha256 = tok.getString("sha256"),
                kind = tok.getString("kind"),
                addSpecialTokens = tok.getBoolean("add_special_tokens"),
                maxLength = if (tok.isNull("max_length")) null else tok.getInt("max_length"),
            )
            val encoder = EncoderSpec(
                file = enc.getString("file"),
                bytes = enc.getLong("bytes"),
                sha256 = enc.getString("sha256"),
                kind = enc.getString("kind"),
                method = enc.getString("method"),
                input = tensors(enc.getJSONArray("inputs")).single(),
                output = tensors(JSONArray().put(enc.getJSONObject("output"))).single(),
                minLength = enc.getInt("min_length"),
                maxLength = enc.getInt("max_length"),
            )
            if (encoder.input.dtype != "int64" || encoder.output.dtype != "float32" || encoder.output.numelPerSample != queryDim) {
                throw ContractException("typed_text encoder takes ${encoder.input.dtype} and gives ${encoder.output.dtype} " +
                    "${encoder.output.shape}; the app feeds int64 ids and reads float32 [1, $queryDim]")
            }
            return TypedText(true, null, tokenizer, encoder)
        }

        private fun tensors(list: JSONArray): List<TensorSpec> = (0 until list.length()).map { i ->
            val t = list.getJSONObject(i)
            val shape = t.getJSONArray("shape")
            // a number is a fixed size; a string names a dynamic dimension (batch, height, width)
            TensorSpec(t.getString("name"), t.getString("dtype"),
                (0 until shape.length()).map { j -> shape.get(j) as? Int })
        }

        private fun JSONArray.strings() = (0 until length()).map { getString(it) }
        private fun JSONArray.floats() = FloatArray(length()) { getDouble(it).toFloat() }
        private fun JSONObject.doubles(): Map<String, Double> =
            keys().asSequence().associateWith { getDouble(it) }
    }
}

class ContractException(message: String) : RuntimeException(message)

/** Hex sha256 of a stream, read in 64 KiB chunks (a .pte never sits in memory whole). */
fun sha256Hex(input: InputStream): String {
    val digest = MessageDigest.getInstance("SHA-256")
    val buf = ByteArray(1 shl 16)
    while (true) {
        val n = input.read(buf)
        if (n < 0) break
        digest.update(buf, 0, n)
    }
    return digest.digest().joinToString("") { "%02x".format(it) }
}

/** The artifact a file holds is the one the contract names only if its size and sha256 agree. */
fun checkArtifactBytes(entry: ArtifactEntry, length: Long, sha256: String) =
    checkFileBytes(entry.file, entry.bytes, entry.sha256, length, sha256)

/**
 * A bundle file's bytes, taken only when they are the ones contract.json's `files` records: a bundle
 * mixed from two builds (an asset copy killed half way) is refused, not run. Returns [bytes].
 */
fun Contract.checkBundleFile(name: String, bytes: ByteArray): ByteArray {
    val entry = files[name] ?: throw ContractException("contract.json does not name $name: rebuild the app's assets")
    checkFileBytes(name, entry.bytes, entry.sha256, bytes.size.toLong(), sha256Hex(bytes.inputStream()))
    return bytes
}

/** Any file the contract names (a .pte, tokenizer.json) by its recorded bytes and sha256. */
fun checkFileBytes(file: String, bytes: Long, sha: String, length: Long, sha256: String) {
    if (length != bytes || sha256 != sha) {
        throw ContractException("$file differs from contract.json (bytes/sha256): rebuild the app's assets")
    }
}
