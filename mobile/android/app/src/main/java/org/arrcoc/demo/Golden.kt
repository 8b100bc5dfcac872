// The golden bundle (golden.json + golden.bin, written by the build and named in contract.json) and
// the parity metrics and gate rule of pipeline/parity.py, so the phone can re-check every artifact
// against the gate the build wrote for it (the app's "Self-check" button and GoldenParityTest).
package org.arrcoc.demo

import android.content.Context
import org.json.JSONObject
import org.pytorch.executorch.Tensor
import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlin.math.abs

/** golden.json lists samples, each one batch-1 run with its own arrays (photos differ in size:
 *  two 16G crops and a whole non-square photo), keyed by the contract's tensor names. */
class GoldenBundle(context: Context, contract: Contract) {
    private val samples: List<JSONObject>
    private val data: ByteBuffer
    val count: Int
    /** Each sample's name in the golden set (e.g. "chelsea/whole"). */
    val names: List<String>

    init {
        val index = JSONObject(contract.openAsset(context, contract.golden.json).bufferedReader().use { it.readText() })
        val list = index.getJSONArray("samples")
        samples = (0 until list.length()).map { list.getJSONObject(it).getJSONObject("arrays") }
        names = (0 until list.length()).map { list.getJSONObject(it).getString("name") }
        count = samples.size
        val bytes = contract.openAsset(context, contract.golden.bin).use { it.readBytes() }
        data = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN) // golden.bin is little-endian
    }

    private fun array(sample: Int, name: String): Triple<String, Int, Int> {
        val arrays = samples[sample]
        if (!arrays.has(name)) throw ContractException("golden sample $sample has no array '$name'")
        val a = arrays.getJSONObject(name)
        return Triple(a.getString("dtype"), a.getInt("offset"), a.getInt("bytes"))
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
        val rgb = Tensor.allocateByteBuffer(bytes)
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
}

/** Same definitions as pipeline/parity.py: abs errors, and top-K set overlap with the tie rule. */
object Parity {
    /** (overlap with the tie rule, strict overlap) of one sample. */
    fun topkOverlap(scores: FloatArray, refIdx: IntArray, gotIdx: IntArray, tie: Double): Pair<Double, Double> {
        val k = refIdx.size
        val a = refIdx.toSet()
        val b = gotIdx.toSet()
        val common = a.intersect(b).size
        val kth = scores.sortedDescending()[k - 1].toDouble()
        // a patch picked only by the artifact counts when it ties the K-th reference score, and only
        // in place of a reference pick that is itself within the tolerance of the K-th score
        val extra = (b - a).count { it >= 0 && it < scores.size && scores[it] >= kth - tie }
        val dropped = (a - b).count { scores[it] <= kth + tie }
        return Pair((common + minOf(extra, dropped)).toDouble() / k, common.toDouble() / k)
    }

    fun measure(expected: List<Prediction>, got: List<Prediction>, tie: Double): MutableMap<String, Double> {
        var relMax = 0.0; var relSum = 0.0; var relN = 0
        var wMax = 0.0; var wSum = 0.0; var wN = 0
        var sumDev = 0.0
        val overlaps = ArrayList<Double>()
        val stricts = ArrayList<Double>()
        for ((e, g) in expected.zip(got)) {
            for (i in e.relevance.indices) {
                val d = abs(g.relevance[i].toDouble() - e.relevance[i].toDouble())
                relMax = maxOf(relMax, d); relSum += d; relN++
            }
            for (i in e.weights.indices) {
                val d = abs(g.weights[i].toDouble() - e.weights[i].toDouble())
                wMax = maxOf(wMax, d); wSum += d; wN++
            }
            sumDev = maxOf(sumDev, abs(g.weights.sumOf { it.toDouble() } - 1.0))
            val (o, s) = topkOverlap(e.relevance, e.topk, g.topk, tie)
            overlaps.add(o); stricts.add(s)
        }
        return mutableMapOf(
            "samples" to got.size.toDouble(),
            "relevance_max_abs" to relMax,
            "relevance_mean_abs" to relSum / maxOf(relN, 1),
            "weights_max_abs" to wMax,
            "weights_mean_abs" to wSum / maxOf(wN, 1),
            "topk_overlap_mean" to overlaps.average(),
            "topk_overlap_min" to (overlaps.minOrNull() ?: 0.0),
            "topk_overlap_strict_mean" to stricts.average(),
            "weights_sum_max_dev" to sumDev,
        )
    }

    /** As Gate.failures in pipeline/parity.py: a limit on an unmeasured or non-finite metric fails. */
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

/** Runs the golden bundle through every artifact of the contract and holds each to its own gate. */
object GoldenCheck {
    class Result(val key: String, val file: String, val metrics: Map<String, Double>, val failures: List<String>) {
        val passed get() = failures.isEmpty()
    }

    fun run(context: Context, contract: Contract): List<Result> {
        val golden = GoldenBundle(context, contract)
        return contract.artifacts.values.map { entry ->
            RelevanceModel.open(context, contract, entry.key).use { model ->
                // each sample's arrays are keyed by the tensor names the contract lists
                val expected = ArrayList<Prediction>()
                val got = ArrayList<Prediction>()
                for (i in 0 until golden.count) {
                    expected.add(Prediction(golden.floats(i, entry.relevanceOutput.name),
                        golden.ints(i, entry.topkOutput.name), golden.floats(i, entry.weightsOutput.name)))
                    got.add(model.predict(golden.photo(i, entry.imageInput.name), golden.floats(i, entry.queryInput.name)))
                }
                val metrics = Parity.measure(expected, got, entry.gate.tieTolerance)
                metrics["size_bytes"] = entry.bytes.toDouble()
                Result(entry.key, entry.file, metrics, Parity.failures(metrics, entry.gate))
            }
        }
    }
}
