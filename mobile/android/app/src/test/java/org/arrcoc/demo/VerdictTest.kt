// Verdict.kt against arrcoc_edge/relevance/evidence.py: the confidence and the verdict line for the
// golden bundle's own evidence (and shifted copies, and the extremes) through a calibration of the
// test's own coefficients, the cells the answer rests on, and a contract without calibration.
// targets/android/app.py writes Python's numbers (mobile_contract.verdict_cases).
package org.arrcoc.demo

import org.json.JSONArray
import org.junit.Assert.assertEquals
import org.junit.Assert.assertNull
import org.junit.Assert.assertTrue
import org.junit.Assert.fail
import org.junit.Test
import java.io.File

class VerdictTest {
    private val contract = Fixtures.contract()
    private val spec by lazy { Fixtures.json(File(Fixtures.fixtures("verdict"), "cases.json")) }

    private fun JSONArray.floats() = FloatArray(length()) { getDouble(it).toFloat() }
    private fun JSONArray.ints() = IntArray(length()) { getInt(it) }
    private fun prediction(evidence: FloatArray) = Prediction(FloatArray(0), IntArray(0), FloatArray(0), evidence)

    @Test
    fun confidenceAndVerdictArePythons() {
        val calibration = Calibration.parse(spec.getJSONObject("calibration"), contract.model.evidenceNames)
        val cases = spec.getJSONArray("cases")
        var seen = setOf<Boolean>()
        for (i in 0 until cases.length()) {
            val c = cases.getJSONObject(i)
            val p = prediction(c.getJSONArray("evidence").floats())
            val confidence = Verdict.confidence(p, calibration)!!
            assertEquals("case $i", c.getDouble("confidence"), confidence, 1e-9)
            assertEquals("case $i", c.getString("text"), Verdict.text(p, calibration))
            seen = seen + (confidence >= Verdict.STANDS_OUT)
        }
        assertEquals("both verdicts are exercised", setOf(true, false), seen)
    }

    @Test
    fun noCalibrationIsSaidNotGuessed() {
        val p = prediction(floatArrayOf(0.6f, 0.5f, 0.4f, 0.7f))
        assertNull(Verdict.confidence(p, null))
        assertEquals(spec.getString("unknown_text"), Verdict.text(p, null))
        assertTrue(Verdict.text(p, null).contains(Verdict.NO_CALIBRATION))
        // the golden bundle holds the evidence output the verdict reads
        val golden = Fixtures.golden(contract)
        val entry = contract.artifacts.getValue(contract.app.defaultArtifact)
        assertEquals(contract.model.evidenceNames.size, golden.prediction(0, entry).evidence.size)
    }

    @Test
    fun aCalibrationOfOtherEvidenceIsRefused() {
        val other = JSONArray(listOf("a", "b", "c", "d"))
        val bad = Fixtures.json(File(Fixtures.fixtures("verdict"), "cases.json")).getJSONObject("calibration").put("features", other)
        try {
            Calibration.parse(bad, contract.model.evidenceNames)
            fail("a calibration of other features was taken")
        } catch (e: ContractException) {
            assertTrue(e.message!!.contains("features"))
        }
    }

    @Test
    fun theOutlinedCellsAreTheStrongestOfTheTopK() {
        val strongest = spec.getJSONArray("strongest")
        assertTrue(strongest.length() > 0)
        for (i in 0 until strongest.length()) {
            val s = strongest.getJSONObject(i)
            val p = Prediction(s.getJSONArray("relevance").floats(), s.getJSONArray("topk").ints(), FloatArray(0), FloatArray(0))
            val cells = Verdict.strongestCells(p, contract.model.numPatches, contract.model.strongestShare)
            assertEquals("sample $i", s.getJSONArray("cells").ints().toList(), cells)
        }
    }
}
