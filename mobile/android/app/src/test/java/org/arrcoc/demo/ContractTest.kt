// Contract.parse on the contract.json the build wrote, and the checks the app makes with it.
package org.arrcoc.demo

import org.json.JSONObject
import org.junit.Assert.assertArrayEquals
import org.junit.Assert.assertEquals
import org.junit.Assert.assertFalse
import org.junit.Assert.assertTrue
import org.junit.Assert.fail
import org.junit.Test
import java.io.File

class ContractTest {
    private val contract = Fixtures.contract()

    @Test
    fun parsesTheContractTheBuildWrote() {
        assertEquals(Contract.SUPPORTED_VERSION, contract.version)
        assertFalse("no artifacts", contract.artifacts.isEmpty())
        assertTrue(contract.app.defaultArtifact in contract.artifacts)
        val m = contract.model
        assertEquals(m.grid * m.grid, m.numPatches)
        assertTrue(m.topK in 1..m.numPatches)
        assertEquals(3, m.weightsOrder.size)
        assertTrue(contract.preprocessing.minSide in 1..contract.preprocessing.maxSide)
    }

    @Test
    fun everyPteNamesItsSquarePhotoMethod() {
        // RelevanceModel calls it for image_size x image_size photos (the build writes it per .pte)
        for (entry in contract.artifacts.values) assertEquals(entry.key, "forward_16g", entry.squareMethod)
    }

    @Test
    fun everyArtifactIsTheFileTheContractNames() {
        for (entry in contract.artifacts.values) {
            val file = File(Fixtures.assets, entry.file)
            checkArtifactBytes(entry, file.length(), file.inputStream().use { sha256Hex(it) })
        }
    }

    @Test
    fun everyBundleFileIsTheOneContractJsonNames() {
        for (name in listOf(contract.golden.json, contract.golden.bin, contract.app.sampleImage)) {
            assertTrue("contract.json's files do not name $name", name in contract.files)
        }
        for ((name, entry) in contract.files) {  // streamed: the typed-text encoder is tens of MB
            val file = File(Fixtures.assets, name)
            checkFileBytes(name, entry.bytes, entry.sha256, file.length(), file.inputStream().use { sha256Hex(it) })
        }
        val golden = File(Fixtures.assets, contract.golden.json).readBytes()
        assertArrayEquals(golden, contract.checkBundleFile(contract.golden.json, golden))
    }

    @Test
    fun aBundleMixedFromTwoBuildsIsRefused() {
        // an asset copy killed half way leaves some files of another build: their bytes differ
        val name = contract.golden.json
        val bytes = File(Fixtures.assets, name).readBytes()
        val changed = bytes.copyOf().also { it[0] = (it[0] + 1).toByte() }
        for (other in listOf(changed, bytes + byteArrayOf(32))) {
            try {
                contract.checkBundleFile(name, other)
                fail("accepted a $name of ${other.size} bytes that is not the build's")
            } catch (e: ContractException) {
                assertTrue(e.message!!, e.message!!.contains(name))
            }
        }
        try {
            contract.checkBundleFile("not-in-the-bundle.bin", bytes)
            fail("accepted a file contract.json does not name")
        } catch (e: ContractException) {
            assertTrue(e.message!!, e.message!!.contains("does not name"))
        }
    }

    @Test
    fun aFileThatDiffersFromTheContractIsRefused() {
        val entry = contract.artifacts.getValue(contract.app.defaultArtifact)
        val other = "0".repeat(64)
        for ((length, sha) in listOf(entry.bytes to other, entry.bytes + 1 to entry.sha256)) {
            try {
                checkArtifactBytes(entry, length, sha)
                fail("accepted $length bytes, sha256 $sha")
            } catch (e: ContractException) {
                assertTrue(e.message!!, e.message!!.contains(entry.file))
            }
        }
    }

    @Test
    fun tensorsAreWhatTheAppFeedsAndReads() {
        val m = contract.model
        for (entry in contract.artifacts.values) {
            // the photo's own size goes into the dynamic dims: uint8 [1, H, W, 3]
            assertEquals("uint8", entry.imageInput.dtype)
            assertArrayEquals(longArrayOf(1, 300, 451, 3), entry.imageInput.shapeFor(1, 300, 451))
            assertEquals(m.queryDim, entry.queryInput.numelPerSample)
            assertEquals(listOf("float32", "float32"), listOf(entry.queryInput.dtype, entry.relevanceOutput.dtype))
            assertEquals(m.numPatches, entry.relevanceOutput.numelPerSample)
            assertEquals(m.topK, entry.topkOutput.numelPerSample)
            assertEquals(entry.topkDtype, entry.topkOutput.dtype)
            assertEquals(3, entry.weightsOutput.numelPerSample)
            assertTrue(entry.maxBatch >= 1)
            assertTrue(entry.gate.max.isNotEmpty() || entry.gate.min.isNotEmpty())
        }
    }

    @Test
    fun presetsMatchTheQueryWidth() {
        val presets = contract.presets
        assertTrue("no presets and no note saying why", presets.items.isNotEmpty() || presets.note != null)
        for (item in presets.items) assertEquals(item.text, contract.model.queryDim, item.embedding.size)
    }

    @Test
    fun anotherContractVersionIsRefused() {
        val text = File(Fixtures.assets, Contract.FILE_NAME).readText()
        val changed = JSONObject(text).put("version", Contract.SUPPORTED_VERSION + 1).toString()
        try {
            Contract.parse(changed)
            fail("parsed a contract of another version")
        } catch (e: ContractException) {
            assertTrue(e.message!!, e.message!!.contains("version"))
        }
    }
}
