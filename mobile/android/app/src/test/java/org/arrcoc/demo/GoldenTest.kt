// The golden reader on the bundle the build wrote, and the parity rule on fixed examples.
package org.arrcoc.demo

import org.junit.Assert.assertEquals
import org.junit.Assert.assertNotEquals
import org.junit.Assert.assertTrue
import org.junit.Test

class GoldenTest {
    private val contract = Fixtures.contract()
    private val golden = Fixtures.golden(contract)
    private val entry = contract.artifacts.getValue(contract.app.defaultArtifact)

    @Test
    fun readsEverySampleOfTheBundle() {
        assertTrue(golden.count >= 1)
        for (i in 0 until golden.count) {
            val shape = golden.shape(i, entry.imageInput.name)
            val photo = golden.photo(i, entry.imageInput.name)
            assertEquals(listOf(1, photo.height, photo.width, 3), shape)
            assertEquals(photo.height * photo.width * 3, photo.rgb.remaining())
            assertTrue("fromBlobUnsigned takes a direct buffer", photo.rgb.isDirect)
            assertEquals(contract.model.queryDim, golden.floats(i, entry.queryInput.name).size)
            val p = golden.prediction(i, entry)
            assertEquals(contract.model.numPatches, p.relevance.size)
            assertEquals(contract.model.topK, p.topk.size)
            assertEquals(3, p.weights.size)
            assertTrue(p.topk.all { it in 0 until contract.model.numPatches })
        }
    }

    @Test
    fun theBundledSampleIsTheWholeNonSquarePhoto() {
        val i = golden.names.indexOf(contract.app.sampleGolden)
        assertTrue("golden bundle has no sample ${contract.app.sampleGolden}", i >= 0)
        val photo = golden.photo(i, entry.imageInput.name)
        assertNotEquals(photo.height, photo.width)
    }

    @Test
    fun theReferenceAgainstItselfMeetsEveryGate() {
        for (e in contract.artifacts.values) {
            val r = GoldenCheck.judge(golden, e) { i, _, _ -> golden.prediction(i, e) }
            assertEquals(r.failures.toString(), true, r.passed)
            assertEquals(0.0, r.metrics.getValue("relevance_max_abs"), 0.0)
            assertEquals(1.0, r.metrics.getValue("topk_overlap_min"), 0.0)
            assertEquals(golden.count.toDouble(), r.metrics.getValue("samples"), 0.0)
        }
    }

    @Test
    fun tieRuleMatchesPipelineParity() {
        // scores 0.9, 0.5, 0.5004, 0.1 with K = 2: the reference picks {0, 2}; picking {0, 1}
        // swaps a tie at the K-th place (within 1e-3) and counts as agreement, strictly it is 1/2.
        val scores = floatArrayOf(0.9f, 0.5f, 0.5004f, 0.1f)
        val (withTies, strict) = Parity.topkOverlap(scores, intArrayOf(0, 2), intArrayOf(0, 1), 1e-3)
        assertEquals(1.0, withTies, 0.0)
        assertEquals(0.5, strict, 0.0)
        val (noTie, _) = Parity.topkOverlap(scores, intArrayOf(0, 2), intArrayOf(0, 3), 1e-3)
        assertEquals(0.5, noTie, 0.0)
    }

    @Test
    fun anUnmeasuredOrNonFiniteMetricFailsTheGate() {
        val gate = GateSpec(mapOf("relevance_max_abs" to 1e-3), mapOf("topk_overlap_min" to 1.0), 1e-3)
        assertEquals(2, Parity.failures(emptyMap(), gate).size)
        assertEquals(1, Parity.failures(mapOf("relevance_max_abs" to Double.NaN, "topk_overlap_min" to 1.0), gate).size)
    }
}
