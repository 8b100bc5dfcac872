// The answer in a few words: whether what the query asks for is in the photo. The model's `evidence`
// output (contract.json model.evidence_names: the participatory map before any min-max) goes through
// the calibration the build fitted on labelled natural photos (calibration.json, carried in
// contract.json's `calibration`) to a confidence, exactly as arrcoc_edge/relevance/evidence.py's
// Calibration computes it. No calibration: no number, and the verdict says so.
// Plain Kotlin + org.json: the JVM tests hold it to Python's numbers (VerdictTest).
package org.arrcoc.demo

import org.json.JSONObject
import java.util.Locale
import kotlin.math.exp
import kotlin.math.roundToInt

/** confidence = 1 / (1 + exp(-(bias + coef . evidence))), fitted for one checkpoint. */
class Calibration(val coef: DoubleArray, val bias: Double) {
    fun confidence(evidence: FloatArray): Double {
        require(evidence.size == coef.size) { "evidence has ${evidence.size} values, the calibration ${coef.size}" }
        var z = bias
        for (i in coef.indices) z += coef[i] * evidence[i].toDouble()
        return 1.0 / (1.0 + exp(-z.coerceIn(-60.0, 60.0)))
    }

    companion object {
        const val FORMAT = "arrcoc-edge/confidence-calibration/1"

        /** calibration.json's object (or contract.json's copy of it), for the model's evidence names. */
        fun parse(o: JSONObject, names: List<String>): Calibration {
            if (o.optString("format") != FORMAT || o.optString("model") != "logistic") {
                throw ContractException("calibration is not a $FORMAT logistic calibration")
            }
            val features = o.getJSONArray("features")
            if ((0 until features.length()).map { features.getString(it) } != names) {
                throw ContractException("calibration features differ from the model's evidence $names")
            }
            val c = o.getJSONArray("coef")
            val coef = DoubleArray(c.length()) { c.getDouble(it) }
            val bias = o.getDouble("bias")
            if (coef.size != names.size || !(coef.all { it.isFinite() } && bias.isFinite())) {
                throw ContractException("calibration needs ${names.size} finite coefficients and a finite bias")
            }
            return Calibration(coef, bias)
        }
    }
}

object Verdict {
    /** confidence at or above this: what the query asks for is more likely there than not. */
    const val STANDS_OUT = 0.5
    const val NO_CALIBRATION = "no calibration in this folder"

    fun confidence(p: Prediction, calibration: Calibration?): Double? =
        if (calibration == null || p.evidence.isEmpty()) null else calibration.confidence(p.evidence)

    /** 0.873 -> "87%"; never "0%" or "100%" for a probability strictly between them. */
    fun percent(v: Double): String {
        val shown = (100 * v).roundToInt()
        return when {
            shown == 0 && v > 0 -> "<1%"
            shown == 100 && v < 1 -> ">99%"
            else -> String.format(Locale.US, "%d%%", shown)
        }
    }

    /** The verdict line, as `invoke predict` says it. */
    fun text(p: Prediction, calibration: Calibration?): String {
        val c = confidence(p, calibration) ?: return "confidence unknown: $NO_CALIBRATION"
        return if (c >= STANDS_OUT) "stands out: confidence ${percent(c)}"
        else "nothing in this photo stands out: confidence ${percent(c)}"
    }

    /** The cells the answer rests on: the strongest share of the grid (signature.strongest_cells),
     *  most relevant first, from the top-K. */
    fun strongestCells(p: Prediction, numPatches: Int, share: Double): List<Int> {
        val n = (numPatches * share).roundToInt().coerceIn(1, numPatches)
        return p.topk.filter { it in 0 until numPatches }.sortedByDescending { p.relevance[it] }.take(n)
    }
}
