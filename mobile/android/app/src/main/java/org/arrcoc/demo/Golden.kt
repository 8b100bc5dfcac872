// The golden bundle (golden.json + golden.bin, written by the build and named in contract.json) and
// the parity metrics and gate rule of pipeline/stages/parity.py, so the phone can re-check every artifact
// against the gate the build wrote for it (the app's "Self-check" button and GoldenParityTest).
// Plain Kotlin + org.json on text and bytes: the JVM tests run it on the bundle the build wrote and
// hold its numbers to pipeline/stages/parity.py's; reading the files out of the APK is Assets.kt's job.
package org.arrcoc.demo

import org.json.JSONObject
import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlin.math.abs

/** One sample's outputs: relevance [num_patches], top-K patch indices [top_k], weights [3], evidence [4]
 *  (contract.json model.evidence_names: what Verdict turns into a confidence). */
class Prediction(val relevance: FloatArray, val topk: IntArray, val weights: FloatArray, val evidence: FloatArray)

/** golden.json lists samples, each one batch-1 run with its own arrays (photos differ in size:
 *  two 16G crops and a whole non-square photo), keyed by the contract's tensor names. */
class GoldenBundle(json: String, bin: ByteArray) {
    private val samples: List<JSONObject>
    private val data: ByteBuffer = ByteBuffer.wrap(bin).order(ByteOrder.LITTLE_ENDIAN) // golden.bin is little-endian
    val count: Int
    /** Each sample's name in the golden set (e.g. "chelsea/whole"). */
    val names: List<String>

    init {
        val list = JSONObject(json).getJSONArray("samples")
        samples = (0 until list.length()).map { list.getJSONObject(it).getJSONObject("arrays") }
        names = (0 until list.length()).map { list.getJSONObject(it).getString("name") }
        count = samples.size
    }

    private fun array(sample: Int, name: String): Triple<String, Int, Int> {
        val arrays = samples[sample]
        if (!arrays.has(name)) throw ContractException("golden sample $sample has no array '$name'")
        val a = arrays.getJSONObject(name)
        val (offset, bytes) = a.getInt("offset") to a.getInt("bytes")
        if (offset < 0 || bytes < 0 || offset + bytes > data.capacity()) {
            throw ContractException("golden $name of sample $sample lies outside golden.bin")
        }
        return Triple(a.getString("dtype"), offset, bytes)
    }

    fun shape(sample: Int, name: String): List<Int> {
        val s = samples[sample].getJSONObject(name).getJSONArray("shape")
        return (0 until s.length()).map { s.getInt(it) }
    }

    /** A uint8 [1,H,W,3] photo of the bundle, as the model takes it. */
    fun photo(sample: Int, name: String): Photo {
        val (dtype, offset, bytes) = array(sample, name)
        if (dtype != "uint8") throw ContractException("golden $name is $dtype, expected uint8")
        val shape = shape(sample, name)
        if (shape.size != 4 || shape[0] != 1 || shape[3] != 3 || bytes != shape[1] * shape[2] * 3) {
            throw ContractException("golden $name has shape $shape ($bytes bytes), expected [1,H,W,3]")
        }
        val rgb = photoBuffer(bytes)
        rgb.put(data.duplicate().apply { position(offset); limit(offset + bytes) })
        rgb.rewind()
        return Photo(rgb, shape[1], shape[2])
    }

    fun floats(sample: Int, name: String): FloatArray {
        val (dtype, offset, bytes) = array(sample, name)
        if (dtype != "float32") throw ContractException("golden $name is $dtype, expected float32")
        return FloatArray(bytes / 4) { data.getFloat(offset + 4 * it) }
    }

    fun ints(sample: Int, name: String): IntArray {
        val (dtype, offset, bytes) = array(sample, name)
        return when (dtype) {
            "int64" -> IntArray(bytes / 8) { data.getLong(offset + 8 * it).toInt() }
            "int32" -> IntArray(bytes / 4) { data.getInt(offset + 4 * it) }
            else -> throw ContractException("golden $name has dtype $dtype")
        }
    }

    /** Sample `i`'s outputs under the tensor names `entry` lists. */
    fun prediction(i: Int, entry: ArtifactEntry) = Prediction(
        floats(i, entry.relevanceOutput.name), ints(i, entry.topkOutput.name), floats(i, entry.weightsOutput.name),
        floats(i, entry.evidenceOutput.name))
}

/** Same definitions as pipeline/stages/parity.py: abs errors, and top-K set overlap with the tie rule. */
object Parity {
    /** (overlap with the tie rule, strict overlap) of one sample. */
    fun topkOverlap(scores: FloatArray, refIdx: IntArray, gotIdx: IntArray, tie: Double): Pair<Double, Double> {
        val k = refIdx.size
        val a = refIdx.toSet()
        val b = gotIdx.toSet()
        val common = a.intersect(b).size
        // float32, as pipeline/stages/parity.py computes it: numpy's float32 K-th score minus a Python float
        // stays float32 (NEP 50), so a score exactly at the edge is judged the same on both sides
        val kth = scores.sortedDescending()[k - 1]
        val tie32 = tie.toFloat()
        // a patch picked only by the artifact counts when it ties the K-th reference score, and only
        // in place of a reference pick that is itself within the tolerance of the K-th score
        val extra = (b - a).count { it >= 0 && it < scores.size && scores[it] >= kth - tie32 }
        val dropped = (a - b).count { scores[it] <= kth + tie32 }
        return Pair((common + minOf(extra, dropped)).toDouble() / k, common.toDouble() / k)
    }

    fun measure(expected: List<Prediction>, got: List<Prediction>, tie: Double): MutableMap<String, Double> {
        var relMax = 0.0; var relSum = 0.0; var relN = 0
        var wMax = 0.0; var wSum = 0.0; var wN = 0
        var eMax = 0.0; var eSum = 0.0; var eN = 0
        var sumDev = 0.0
        val overlaps = ArrayList<Double>()
        val stricts = ArrayList<Double>()
        require(expected.size == got.size) { "${got.size} predictions for ${expected.size} golden samples" }
        for ((e, g) in expected.zip(got)) {
            for (i in e.relevance.indices) {
                val d = abs(g.relevance[i].toDouble() - e.relevance[i].toDouble())
                relMax = maxOf(relMax, d); relSum += d; relN++
            }
            for (i in e.weights.indices) {
                val d = abs(g.weights[i].toDouble() - e.weights[i].toDouble())
                wMax = maxOf(wMax, d); wSum += d; wN++
            }
            for (i in e.evidence.indices) {
                val d = abs(g.evidence[i].toDouble() - e.evidence[i].toDouble())
                eMax = maxOf(eMax, d); eSum += d; eN++
            }
            // float32, as numpy sums a float32 array (pipeline/stages/parity.py: weights.sum(axis=1) - 1.0)
            sumDev = maxOf(sumDev, abs(g.weights.sum() - 1f).toDouble())
            val (o, s) = topkOverlap(e.relevance, e.topk, g.topk, tie)
            overlaps.add(o); stricts.add(s)
        }
        return mutableMapOf(
            "samples" to got.size.toDouble(),
            "relevance_max_abs" to relMax,
            "relevance_mean_abs" to relSum / maxOf(relN, 1),
            "weights_max_abs" to wMax,
            "weights_mean_abs" to wSum / maxOf(wN, 1),
            "evidence_max_abs" to eMax,
            "evidence_mean_abs" to eSum / maxOf(eN, 1),
            "topk_overlap_mean" to overlaps.average(),
            "topk_overlap_min" to (overlaps.minOrNull() ?: 0.0),
            "topk_overlap_strict_mean" to stricts.average(),
            "weights_sum_max_dev" to sumDev,
        )
    }

    /** As Gate.failures in pipeline/stages/parity.py: a limit on an unmeasured or non-finite metric fails. */
    fun failures(metrics: Map<String, Double>, gate: GateSpec): List<String> {
        val out = ArrayList<String>()
        for ((name, limit) in gate.max.toSortedMap()) {
            val v = metrics[name]
            if (v == null || !v.isFinite() || v > limit) out.add("$name=${v ?: "unmeasured"} > $limit")
        }
        for ((name, limit) in gate.min.toSortedMap()) {
            val v = metrics[name]
            if (v == null || !v.isFinite() || v < limit) out.add("$name=${v ?: "unmeasured"} < $limit")
        }
        return out
    }
}

/** Holds an artifact's outputs on the golden bundle to the artifact's own gate. */
object GoldenCheck {
    class Result(val key: String, val file: String, val metrics: Map<String, Double>, val failures: List<String>) {
        val passed get() = failures.isEmpty()
    }

    /** `predict` runs one golden photo and query (the device's runtime; on the JVM, recorded outputs). */
    fun judge(golden: GoldenBundle, entry: ArtifactEntry, predict: (Int, Photo, FloatArray) -> Prediction): Result {
        // each sample's arrays are keyed by the tensor names the contract lists
        val expected = (0 until golden.count).map { golden.prediction(it, entry) }
        val got = (0 until golden.count).map {
            predict(it, golden.photo(it, entry.imageInput.name), golden.floats(it, entry.queryInput.name))
        }
        val metrics = Parity.measure(expected, got, entry.gate.tieTolerance)
        metrics["size_bytes"] = entry.bytes.toDouble()
        return Result(entry.key, entry.file, metrics, Parity.failures(metrics, entry.gate))
    }
}
