// Tokenizer.kt against Python's `tokenizers` on the build's corpus and seeded random lines, for each
// tokenizer.json the project ships (targets/shared/tokenizer_cases.py writes the queries and Python's ids),
// and the refusal of a tokenizer.json of another kind.
package org.arrcoc.demo

import org.json.JSONArray
import org.json.JSONObject
import org.junit.Assert.assertEquals
import org.junit.Assert.assertFalse
import org.junit.Assert.assertTrue
import org.junit.Assert.fail
import org.junit.Test
import java.io.File

class TokenizerTest {
    private fun ints(a: JSONArray) = IntArray(a.length()) { a.getInt(it) }

    @Test
    fun idsEqualPythonsOnTheCorpus() {
        val dir = Fixtures.fixtures("tokenizer")
        val data = Fixtures.json(File(dir, "cases.json"))
        val texts = data.getJSONArray("texts")
        val cases = data.getJSONArray("cases")
        // both shipped tokenizers are checked, or the build says why one is missing
        assertEquals(data.getJSONArray("missing").toString(), 2, cases.length() + data.getJSONArray("missing").length())
        for (c in 0 until cases.length()) {
            val case = cases.getJSONObject(c)
            val maxLength = if (case.isNull("max_length")) null else case.getInt("max_length")
            val file = File(case.getString("tokenizer")).let { if (it.isAbsolute) it else File(dir, it.path) }
            val tokenizer = Tokenizer.fromJson(file.readText(), maxLength)
            assertEquals(case.getString("kind"), tokenizer.kind)
            assertEquals(maxLength, tokenizer.maxLength)
            val expected = case.getJSONArray("ids")
            for (i in 0 until texts.length()) {
                val want = ints(expected.getJSONArray(i))
                val got = tokenizer.encode(texts.getString(i))
                if (!want.contentEquals(got)) {
                    fail("${case.getString("name")} line ${i + 1} ${JSONObject.quote(texts.getString(i)).take(80)}: " +
                         "Python ${want.take(12)}, Kotlin ${got.take(12)}")
                }
            }
        }
    }

    @Test
    fun aTokenizerOfAnotherKindIsRefusedWithOneLine() {
        val others = listOf("""{"model": {"type": "Unigram", "vocab": []}}""", "[1, 2]", "not json",
                            """{"model": {"type": "WordPiece", "vocab": {}}, "normalizer": {"type": "NFKC"}}""")
        for (json in others) {
            try {
                Tokenizer.fromJson(json)
                fail("accepted $json")
            } catch (e: IllegalArgumentException) {
                val message = e.message!!
                assertFalse(message, message.contains('\n'))
                assertTrue(message, message.startsWith("tokenizer.json"))
            }
        }
    }
}
