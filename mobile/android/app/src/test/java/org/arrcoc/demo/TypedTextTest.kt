// contract.json's typed_text as the build wrote it, and the plain logic between the app's tokenizer
// and the query encoder .pte (TypedQuery): lengths, dtypes, the tokenizer kind.
package org.arrcoc.demo

import org.junit.Assert.assertArrayEquals
import org.junit.Assert.assertEquals
import org.junit.Assert.assertTrue
import org.junit.Assert.fail
import org.junit.Assert.assertNull
import org.junit.Test
import java.io.File

class TypedTextTest {
    private val contract = Fixtures.contract()

    /** The contract's typed_text when supported; null (after checking it names no file and says
     *  why) for a presets-only build. Not a JUnit skip: the build fails on any skipped test. */
    private fun typed(): TypedText? {
        val t = contract.typedText
        if (t.supported) return t
        assertTrue("typed_text unsupported without saying why", !t.why.isNullOrBlank())
        assertNull(t.encoder)
        assertNull(t.tokenizer)
        return null
    }

    @Test
    fun theTokenizerAndEncoderAreTheFilesTheContractNames() {
        val t = typed() ?: return
        val tok = t.tokenizer!!
        val enc = t.encoder!!
        for ((name, bytes, sha) in listOf(Triple(tok.file, tok.bytes, tok.sha256), Triple(enc.file, enc.bytes, enc.sha256))) {
            val file = File(Fixtures.assets, name)
            checkFileBytes(name, bytes, sha, file.length(), file.inputStream().use { sha256Hex(it) })
        }
        assertTrue(tok.kind, tok.kind in setOf("wordpiece", "bpe-bytelevel"))
        assertEquals(contract.model.queryDim, enc.output.numelPerSample)
        assertEquals("int64", enc.input.dtype)
        assertTrue(enc.minLength in 1..enc.maxLength)
        // MiniLM: special tokens, cut at its max length; arr-coc-0-1's mean: raw ids, no cut
        assertEquals(tok.addSpecialTokens, tok.maxLength != null)
    }

    @Test
    fun idsGoInAsInt64OfTheEncodersShape() {
        val enc = (typed() ?: return).encoder!!
        val ids = IntArray(enc.minLength + 3) { 100 + it }
        assertArrayEquals(LongArray(ids.size) { 100L + it }, TypedQuery.encoderIds(enc, ids))
        val shape = enc.input.shapeFor(ids.size)
        assertEquals(ids.size.toLong(), shape.last())
        assertEquals(ids.size.toLong(), shape.fold(1L) { a, b -> a * b })
    }

    @Test
    fun queriesOutsideTheEncodersLengthsAreRefusedWithAReason() {
        val enc = (typed() ?: return).encoder!!
        TypedQuery.encoderIds(enc, IntArray(enc.maxLength))
        for (n in listOf(enc.minLength - 1, enc.maxLength + 1)) {
            try {
                TypedQuery.encoderIds(enc, IntArray(n))
                fail("accepted $n ids (lengths ${enc.minLength}..${enc.maxLength})")
            } catch (e: QueryException) {
                assertTrue(e.message!!, e.message!!.contains("type"))
            }
        }
    }

    @Test
    fun aTokenizerOfAnotherKindIsRefused() {
        val tok = (typed() ?: return).tokenizer!!
        TypedQuery.checkTokenizer(tok, tok.kind, tok.maxLength)
        val other = if (tok.kind == "wordpiece") "bpe-bytelevel" else "wordpiece"
        for ((kind, max) in listOf(other to tok.maxLength, tok.kind to (tok.maxLength ?: 0) + 1)) {
            try {
                TypedQuery.checkTokenizer(tok, kind, max)
                fail("accepted a $kind tokenizer cutting at $max")
            } catch (e: ContractException) {
                assertTrue(e.message!!, e.message!!.contains(tok.file))
            }
        }
    }

    @Test
    fun aQueryOfOnlyInvisibleCharactersIsRefusedBeforeTheTokenizer() {
        for (text in listOf("", "   ", "\u200b\u200b", "\ufeff", " \u200d\u2060 ", "\u200e\t")) {
            try {
                TypedQuery.checkText(text)
                fail("taken: ${text.map { it.code }}")
            } catch (e: QueryException) {
                assertTrue(e.message!!, e.message!!.contains("no visible characters"))
            }
        }
        for (text in listOf("a\u200bb", "赤いもの", "\u200bsomething red", "\uD83D\uDE00")) TypedQuery.checkText(text)
    }
}
