// Golden.kt's metrics and gate against pipeline/stages/parity.py's, on outputs the build recorded: the .pte
// files run in ExecuTorch's Python runtime (no ExecuTorch runtime exists for a desktop JVM) and
// perturbed copies that the gate must pass (a swap at the K-th place within the tie tolerance) or
// fail (a swap outside it, a relevance offset beyond the gate). targets/android/app.py writes each
// case in the golden-bundle format with Python's metrics and failing limits; this test computes its
// own, compares them with the tolerances the case file states, and writes them out for the report.
package org.arrcoc.demo

import org.json.JSONArray
import org.json.JSONObject
import org.junit.Assert.assertEquals
import org.junit.Assert.assertTrue
import org.junit.Test
import java.io.File
import kotlin.math.abs

class ParityAgainstPythonTest {
    @Test
    fun everyMetricAndVerdictEqualsPipelineParity() {
        val dir = Fixtures.fixtures("parity")
        val spec = Fixtures.json(File(dir, "cases.json"))
        val tolerance = spec.getJSONObject("tolerance")
        val contract = Fixtures.contract()
        val golden = Fixtures.golden(contract)
        val cases = spec.getJSONArray("cases")
        assertTrue("no cases", cases.length() > 0)
        val report = JSONObject()
        val verdicts = mutableSetOf<Boolean>()
        for (n in 0 until cases.length()) {
            val case = cases.getJSONObject(n)
            val name = case.getString("name")
            val entry = contract.artifacts.getValue(case.getString("artifact"))
            val expected = if (case.isNull("expected")) golden else bundle(dir, case.getString("expected"))
            val got = bundle(dir, case.getString("got"))
            val result = GoldenCheck.judge(expected, entry) { i, _, _ -> got.prediction(i, entry) }
            report.put(name, JSONObject().put("metrics", JSONObject(result.metrics as Map<*, *>))
                .put("failing", JSONArray(failing(result.failures))).put("passed", result.passed))

            val python = case.getJSONObject("python")
            val metrics = python.getJSONObject("metrics")
            assertEquals("$name: metric names", metrics.keys().asSequence().toSortedSet(), result.metrics.keys.toSortedSet())
            for (key in metrics.keys()) {
                val want = metrics.getDouble(key)
                val have = result.metrics.getValue(key)
                val allowed = if (tolerance.has(key)) tolerance.getDouble(key) else tolerance.getDouble("default")
                assertTrue("$name: $key is $have in Kotlin, $want in pipeline/stages/parity.py (tolerance $allowed)",
                    abs(have - want) <= allowed)
            }
            val pythonFailing = (0 until python.getJSONArray("failing").length())
                .map { python.getJSONArray("failing").getString(it) }.toSortedSet()
            assertEquals("$name: failing limits", pythonFailing, failing(result.failures).toSortedSet())
            assertEquals("$name: the verdict this case was built for", case.getBoolean("expect_pass"), result.passed)
            verdicts.add(result.passed)
        }
        assertEquals("the cases exercise the gate both ways", setOf(true, false), verdicts)
        File(dir, "kotlin-metrics.json").writeText(report.toString(1))
    }

    private fun bundle(dir: File, folder: String) = Fixtures.bundle(File(dir, folder), "golden.json", "golden.bin")

    /** The metric name of each failure ("relevance_max_abs=0.002 > 0.001" -> "relevance_max_abs"). */
    private fun failing(failures: List<String>) = failures.map { it.substringBefore('=') }
}
