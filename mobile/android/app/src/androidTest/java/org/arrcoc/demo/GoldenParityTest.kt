// Runs the golden bundle through every .pte that contract.json lists, in the ExecuTorch Android
// runtime on the device (or emulator), and holds each to the gate the build wrote for it, with the
// metrics and tie rule of pipeline/stages/parity.py. This is the on-device parity check the Linux build
// cannot make (there, the executorch target measures the same .pte files in ExecuTorch's Python
// runtime). Run: ./gradlew connectedAndroidTest (mobile/README.md, Android).
package org.arrcoc.demo

import android.util.Log
import androidx.test.ext.junit.runners.AndroidJUnit4
import androidx.test.platform.app.InstrumentationRegistry
import org.junit.Assert.assertEquals
import org.junit.Assert.assertFalse
import org.junit.Assert.assertTrue
import org.junit.Test
import org.junit.runner.RunWith

@RunWith(AndroidJUnit4::class)
class GoldenParityTest {
    // the app's own assets (contract.json and the files it names), not the test APK's
    private val context get() = InstrumentationRegistry.getInstrumentation().targetContext

    @Test
    fun everyArtifactMeetsItsGate() {
        val contract = Contract.load(context)
        assertFalse("contract.json lists no artifacts", contract.artifacts.isEmpty())
        val results = GoldenCheck.run(context, contract)
        assertEquals(contract.artifacts.keys, results.map { it.key }.toSet())
        for (r in results) {
            Log.i("GoldenParityTest", "golden parity ${r.key} (${r.file}): ${r.metrics.toSortedMap()}")
            assertTrue("${r.file}: ${r.failures}", r.passed)
            assertTrue("${r.file}: no golden samples ran", (r.metrics["samples"] ?: 0.0) >= 1.0)
        }
    }

    @Test
    fun samplePhotoDecodesToTheGoldenBytes() {
        // The app's own decode path (BitmapFactory, copyPixelsToBuffer, alpha dropped, EXIF) on the
        // bundled sample, a lossless PNG of the golden whole photo: byte for byte what PIL decoded.
        val contract = Contract.load(context)
        val golden = contract.goldenBundle(context)
        val sample = golden.names.indexOf(contract.app.sampleGolden)
        assertTrue("golden bundle has no sample ${contract.app.sampleGolden}", sample >= 0)
        val image = contract.artifacts.getValue(contract.app.defaultArtifact).imageInput.name
        val expected = golden.photo(sample, image)
        val got = Preprocess.decodePhoto({ contract.checkedAsset(context, contract.app.sampleImage).inputStream() }, contract.preprocessing)
        assertEquals(expected.height, got.height)
        assertEquals(expected.width, got.width)
        assertTrue("decoded bytes differ from the golden photo", expected.rgb == got.rgb)
    }

    @Test
    fun presetsMatchTheQueryWidth() {
        val contract = Contract.load(context)
        for (item in contract.presets.items) {
            assertEquals(item.text, contract.model.queryDim, item.embedding.size)
        }
    }

    // The tie rule itself is tested on the JVM (app/src/test GoldenTest.tieRuleMatchesPipelineParity),
    // against pipeline/stages/parity.py's numbers, in every android build: no device needed for it.
}
