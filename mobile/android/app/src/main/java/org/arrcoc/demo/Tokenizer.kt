// The tokenizer of a typed query, read from the build's own tokenizer.json (the file the page and
// Python use) and doing what it says for the two kinds the project ships: BERT WordPiece
// (all-MiniLM-L6-v2) and byte-level BPE (Qwen3, for arr-coc-0-1 checkpoints). It is held to Python's
// `tokenizers` id for id: `invoke app-tokenize --app android` runs this code (see mobile/README.md)
// and TokenizerTest compares it with the reference's ids on the build's corpus. A tokenizer.json of
// any other kind is refused with one line (IllegalArgumentException).
// Plain Kotlin + org.json + java.text.Normalizer, no Android class. The Unicode classes are the
// crate's own (UnicodeTables.kt); NFC/NFD (java.text.Normalizer) and lowercase (String.lowercase)
// are the platform's: mobile/README.md says where those differ from the crate.
package org.arrcoc.demo

import org.json.JSONArray
import org.json.JSONObject
import java.text.Normalizer
import java.util.Locale
import java.util.PriorityQueue

class Tokenizer private constructor(
    /** "wordpiece" or "bpe-bytelevel". */
    val kind: String,
    /** The most ids encode returns (special tokens included); null: no limit. */
    val maxLength: Int?,
    private val added: Map<String, Int>,
    private val model: (String) -> List<Int>,
    private val prefix: IntArray,
    private val suffix: IntArray,
) {
    /** The ids the app's encoder gets for [text]: added tokens matched in the raw text, the rest
     *  normalized, pre-tokenized and run through the model, then the template's special tokens,
     *  the content cut first so that the whole fits [maxLength] (as transformers cuts one text). */
    fun encode(text: String): IntArray {
        val content = ArrayList<Int>()
        for ((segment, id) in splitAddedTokens(text)) {
            if (id != null) content.add(id) else content.addAll(model(segment))
        }
        val room = maxLength?.let { maxOf(0, it - prefix.size - suffix.size) } ?: content.size
        return prefix + content.take(room).toIntArray() + suffix
    }

    /** (text, null) and (token, id) pieces: the added tokens' leftmost-longest matches, as the
     *  crate's AddedVocabulary finds them (all of ours are matched on the raw, unnormalized text). */
    private fun splitAddedTokens(text: String): List<Pair<String, Int?>> {
        if (added.isEmpty()) return listOf(text to null)
        val out = ArrayList<Pair<String, Int?>>()
        var start = 0
        var i = 0
        while (i < text.length) {
            var best: String? = null
            for (token in added.keys) {
                if (text.startsWith(token, i) && token.length > (best?.length ?: 0)) best = token
            }
            if (best == null) { i++; continue }
            if (i > start) out.add(text.substring(start, i) to null)
            out.add(best to added.getValue(best))
            i += best.length
            start = i
        }
        if (start < text.length) out.add(text.substring(start) to null)
        return out
    }

    companion object {
        /** A tokenizer.json's text. [maxLength]: the encoder's maximum length (contract.json's; 256
         *  for all-MiniLM-L6-v2, sentence-transformers' max_seq_length), null for none. The file's own
         *  `truncation` and `padding` sections are not applied: transformers overrides both with its
         *  call's arguments, which is how the Python encoder runs it. */
        fun fromJson(json: String, maxLength: Int? = null): Tokenizer {
            val root = try { JSONObject(json) } catch (e: org.json.JSONException) {
                throw IllegalArgumentException("tokenizer.json is not a JSON object (${e.message?.lineSequence()?.first()})")
            }
            require(maxLength == null || maxLength >= 0) { "maxLength must be >= 0, got $maxLength" }
            val model = root.optJSONObject("model") ?: refuse("it has no \"model\" object")
            val added = addedTokens(root)
            return when (val type = model.optString("type")) {
                "WordPiece" -> wordPiece(root, model, added, maxLength)
                "BPE" -> byteLevelBpe(root, model, added, maxLength)
                else -> refuse("its model is ${type.ifEmpty { "untyped" }}")
            }
        }

        private fun refuse(what: String): Nothing = throw IllegalArgumentException(
            "tokenizer.json: $what; this app reads BERT WordPiece (all-MiniLM-L6-v2) and Qwen3's byte-level BPE only")

        private fun typeOf(o: JSONObject?): String? = o?.optString("type")

        private fun addedTokens(root: JSONObject): Map<String, Int> {
            val list = root.optJSONArray("added_tokens") ?: JSONArray()
            val out = HashMap<String, Int>()
            for (i in 0 until list.length()) {
                val t = list.getJSONObject(i)
                val content = t.getString("content")
                if (t.optBoolean("normalized") || t.optBoolean("lstrip") || t.optBoolean("rstrip") || t.optBoolean("single_word")) {
                    refuse("added token \"$content\" is normalized, stripped or single-word")
                }
                if (content.isNotEmpty()) out[content] = t.getInt("id")
            }
            return out
        }

        private fun vocab(model: JSONObject): HashMap<String, Int> {
            val v = model.getJSONObject("vocab")
            val out = HashMap<String, Int>(v.length() * 2)
            for (key in v.keys()) out[key] = v.getInt(key)
            return out
        }

        // ---- BERT WordPiece ----

        private fun wordPiece(root: JSONObject, model: JSONObject, added: Map<String, Int>, maxLength: Int?): Tokenizer {
            val norm = root.optJSONObject("normalizer")
            if (typeOf(norm) != "BertNormalizer") refuse("WordPiece without a BertNormalizer (${typeOf(norm)})")
            if (typeOf(root.optJSONObject("pre_tokenizer")) != "BertPreTokenizer") refuse("WordPiece without a BertPreTokenizer")
            val lowercase = norm!!.optBoolean("lowercase", true)
            val bert = BertNormalizer(
                cleanText = norm.optBoolean("clean_text", true),
                chineseChars = norm.optBoolean("handle_chinese_chars", true),
                stripAccents = if (norm.isNull("strip_accents")) lowercase else norm.getBoolean("strip_accents"),
                lowercase = lowercase,
            )
            val vocab = vocab(model)
            val unk = vocab[model.getString("unk_token")] ?: refuse("its unk_token is not in the vocabulary")
            val wp = WordPiece(vocab, unk, model.optString("continuing_subword_prefix", "##"),
                               model.optInt("max_input_chars_per_word", 100))
            val (prefix, suffix) = template(root.optJSONObject("post_processor"))
            val encodeSegment = { text: String -> bertWords(bert.normalize(text)).flatMap { wp.word(it) } }
            return Tokenizer("wordpiece", maxLength, added, encodeSegment, prefix, suffix)
        }

        /** TemplateProcessing's `single`: the special tokens' ids before and after sequence A. */
        private fun template(post: JSONObject?): Pair<IntArray, IntArray> {
            when (typeOf(post)) {
                null -> return IntArray(0) to IntArray(0)
                "ByteLevel" -> return IntArray(0) to IntArray(0)  // offsets only: no ids of its own
                "TemplateProcessing" -> {}
                else -> refuse("its post-processor is ${typeOf(post)}")
            }
            val single = post!!.getJSONArray("single")
            val specials = post.getJSONObject("special_tokens")
            val before = ArrayList<Int>()
            val after = ArrayList<Int>()
            var seenA = false
            for (i in 0 until single.length()) {
                val item = single.getJSONObject(i)
                if (item.has("Sequence")) { seenA = true; continue }
                val name = item.getJSONObject("SpecialToken").getString("id")
                val ids = specials.getJSONObject(name).getJSONArray("ids")
                for (k in 0 until ids.length()) (if (seenA) after else before).add(ids.getInt(k))
            }
            return before.toIntArray() to after.toIntArray()
        }

        // ---- Qwen3's byte-level BPE ----

        /** The Split pattern this code implements by hand (QwenSplit): the Rust crate runs it with
         *  Oniguruma, whose ordered alternation and look-ahead java.util.regex does not promise. */
        const val QWEN_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

        private fun byteLevelBpe(root: JSONObject, model: JSONObject, added: Map<String, Int>, maxLength: Int?): Tokenizer {
            val norm = root.optJSONObject("normalizer")
            if (norm != null && typeOf(norm) != "NFC") refuse("BPE with a ${typeOf(norm)} normalizer")
            val pre = root.optJSONObject("pre_tokenizer")
            val steps = pre?.optJSONArray("pretokenizers")
            if (typeOf(pre) != "Sequence" || steps == null || steps.length() != 2) refuse("BPE without Qwen3's Split + ByteLevel pre-tokenizer")
            val split = steps.getJSONObject(0)
            val byteLevel = steps.getJSONObject(1)
            if (typeOf(split) != "Split" || split.optJSONObject("pattern")?.optString("Regex") != QWEN_PATTERN ||
                split.optString("behavior") != "Isolated" || split.optBoolean("invert")) refuse("its Split pre-tokenizer is not Qwen3's")
            if (typeOf(byteLevel) != "ByteLevel" || byteLevel.optBoolean("add_prefix_space") || byteLevel.optBoolean("use_regex", true)) {
                refuse("its ByteLevel pre-tokenizer adds a prefix space or its own regex")
            }
            if (!model.isNull("dropout") || model.optString("continuing_subword_prefix").isNotEmpty() ||
                model.optString("end_of_word_suffix").isNotEmpty() || model.optBoolean("byte_fallback") ||
                model.optBoolean("ignore_merges")) refuse("its BPE uses dropout, affixes, byte fallback or ignore_merges")
            val bpe = Bpe(vocab(model), model.getJSONArray("merges"))
            val nfc = norm != null
            val encodeSegment = { text: String ->
                val normalized = if (nfc) Normalizer.normalize(text, Normalizer.Form.NFC) else text
                QwenSplit.pieces(normalized).flatMap { bpe.word(ByteLevel.encode(it)) }
            }
            val (prefix, suffix) = template(root.optJSONObject("post_processor"))
            return Tokenizer("bpe-bytelevel", maxLength, added, encodeSegment, prefix, suffix)
        }
    }
}

/** Unicode classes as the Rust crate decides them: White_Space by its (stable) list, the rest from
 *  UnicodeTables.kt, generated from the crate, so a device's older or newer tables change nothing. */
internal object UnicodeClass {
    /** The White_Space property (Rust's char::is_whitespace, Oniguruma's \s). */
    fun isWhitespace(c: Int) = c in 0x09..0x0D || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
        c in 0x2000..0x200A || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000

    fun isOther(c: Int) = inRanges(UnicodeTables.other, c)
    fun isPunctuation(c: Int) = inRanges(UnicodeTables.punctuation, c)
    fun isNonspacingMark(c: Int) = inRanges(UnicodeTables.nonspacingMark, c)
    fun isLetter(c: Int) = inRanges(UnicodeTables.letter, c)
    fun isNumber(c: Int) = inRanges(UnicodeTables.number, c)

    /** Binary search in [start0, end0, start1, end1, ...] (sorted, inclusive). */
    private fun inRanges(table: IntArray, c: Int): Boolean {
        var lo = 0
        var hi = table.size / 2 - 1
        while (lo <= hi) {
            val mid = (lo + hi) ushr 1
            when {
                c < table[2 * mid] -> hi = mid - 1
                c > table[2 * mid + 1] -> lo = mid + 1
                else -> return true
            }
        }
        return false
    }
}

/** tokenizers' BertNormalizer: clean text, space out CJK ideographs, strip accents, lowercase. */
internal class BertNormalizer(val cleanText: Boolean, val chineseChars: Boolean, val stripAccents: Boolean, val lowercase: Boolean) {
    fun normalize(text: String): String {
        var s = text
        if (cleanText) s = mapCodePoints(s) { c, out ->
            when {
                c == 0 || c == 0xFFFD || (c != 0x09 && c != 0x0A && c != 0x0D && UnicodeClass.isOther(c)) -> {}
                UnicodeClass.isWhitespace(c) -> out.append(' ')
                else -> out.appendCodePoint(c)
            }
        }
        if (chineseChars) s = mapCodePoints(s) { c, out ->
            if (isChineseChar(c)) out.append(' ').appendCodePoint(c).append(' ') else out.appendCodePoint(c)
        }
        if (stripAccents) s = mapCodePoints(Normalizer.normalize(s, Normalizer.Form.NFD)) { c, out ->
            if (!UnicodeClass.isNonspacingMark(c)) out.appendCodePoint(c)
        }
        if (lowercase) s = mapCodePoints(s) { c, out ->
            // per code point, full mapping (U+0130 -> "i\u0307"), no context: as Rust's char::to_lowercase
            if (c < 0x80) out.append(Character.toLowerCase(c.toChar())) else out.append(String(Character.toChars(c)).lowercase(Locale.ROOT))
        }
        return s
    }

    /** bert.rs is_chinese_char, with the crate's ranges (its extension E starts at U+2B920). */
    private fun isChineseChar(c: Int) = c in 0x4E00..0x9FFF || c in 0x3400..0x4DBF || c in 0x20000..0x2A6DF ||
        c in 0x2A700..0x2B73F || c in 0x2B740..0x2B81F || c in 0x2B920..0x2CEAF || c in 0xF900..0xFAFF || c in 0x2F800..0x2FA1F
}

internal inline fun mapCodePoints(s: String, each: (Int, StringBuilder) -> Unit): String {
    val out = StringBuilder(s.length + 8)
    var i = 0
    while (i < s.length) {
        val c = s.codePointAt(i)
        each(c, out)
        i += Character.charCount(c)
    }
    return out.toString()
}

/** BertPreTokenizer: words split on whitespace (dropped) and punctuation (kept, one per word). */
internal fun bertWords(text: String): List<String> {
    val words = ArrayList<String>()
    val word = StringBuilder()
    fun flush() { if (word.isNotEmpty()) { words.add(word.toString()); word.setLength(0) } }
    var i = 0
    while (i < text.length) {
        val c = text.codePointAt(i)
        i += Character.charCount(c)
        when {
            UnicodeClass.isWhitespace(c) -> flush()
            UnicodeClass.isPunctuation(c) -> { flush(); words.add(String(Character.toChars(c))) }
            else -> word.appendCodePoint(c)
        }
    }
    flush()
    return words
}

/** WordPiece: greedy longest-match-first; a word it cannot cover, or longer than
 *  max_input_chars_per_word code points, is the unknown token. */
internal class WordPiece(private val vocab: Map<String, Int>, private val unk: Int, private val prefix: String, private val maxChars: Int) {
    fun word(word: String): List<Int> {
        if (word.codePointCount(0, word.length) > maxChars) return listOf(unk)
        val ids = ArrayList<Int>()
        var start = 0
        while (start < word.length) {
            var end = word.length
            var found: Int? = null
            while (end > start) {
                val piece = word.substring(start, end)
                found = vocab[if (start > 0) prefix + piece else piece]
                if (found != null) break
                end = word.offsetByCodePoints(end, -1)
            }
            if (found == null) return listOf(unk)
            ids.add(found)
            start = end
        }
        return ids
    }
}

/** GPT-2's byte -> character map: printable bytes stand for themselves, the rest from U+0100 on. */
internal object ByteLevel {
    private val table: CharArray = run {
        val t = CharArray(256)
        var next = 256
        for (b in 0 until 256) {
            val printable = b in 0x21..0x7E || b in 0xA1..0xAC || b in 0xAE..0xFF
            t[b] = if (printable) b.toChar() else (next++).toChar()
        }
        t
    }

    fun encode(piece: String): String {
        val bytes = piece.toByteArray(Charsets.UTF_8)
        val out = CharArray(bytes.size)
        for (i in bytes.indices) out[i] = table[bytes[i].toInt() and 0xFF]
        return String(out)
    }
}

/** BPE with merges by rank: the lowest-ranked adjacent pair merges first, leftmost on a tie (the
 *  order of the crate's priority queue). */
internal class Bpe(private val vocab: Map<String, Int>, merges: JSONArray) {
    /** (left id, right id) -> rank << 32 | merged id. */
    private val merges = HashMap<Long, Long>(merges.length() * 2)

    init {
        for (rank in 0 until merges.length()) {
            val m = merges.get(rank)
            val (a, b) = if (m is JSONArray) m.getString(0) to m.getString(1)
                         else m.toString().split(" ", limit = 2).let { it[0] to it[1] }
            val ia = vocab[a]; val ib = vocab[b]; val merged = vocab[a + b]
            require(ia != null && ib != null && merged != null) { "tokenizer.json: merge \"$a $b\" (rank $rank) names a token the vocabulary lacks" }
            val k = key(ia, ib)
            if (k !in this.merges) this.merges[k] = (rank.toLong() shl 32) or merged.toLong()  // the first rank wins
        }
    }

    private fun key(a: Int, b: Int) = (a.toLong() shl 32) or (b.toLong() and 0xFFFFFFFFL)

    fun word(symbols: String): List<Int> {
        // one symbol per character (every byte-level character is in the vocabulary), linked as a list
        val n = symbols.length
        val id = IntArray(n) { vocab[symbols[it].toString()] ?: throw IllegalStateException("byte-level character ${symbols[it]} not in the vocabulary") }
        val next = IntArray(n) { if (it + 1 < n) it + 1 else -1 }
        val prev = IntArray(n) { it - 1 }
        val alive = BooleanArray(n) { true }
        // (rank, position, merged id): the queue orders by rank, then position
        val queue = PriorityQueue<LongArray>(11, compareBy<LongArray>({ it[0] }, { it[1] }))
        fun push(pos: Int) {
            val r = next[pos]
            if (r < 0) return
            val m = merges[key(id[pos], id[r])] ?: return
            queue.add(longArrayOf(m ushr 32, pos.toLong(), m and 0xFFFFFFFFL))
        }
        for (i in 0 until n) push(i)
        while (queue.isNotEmpty()) {
            val top = queue.poll()
            val pos = top[1].toInt()
            val r = next[pos]
            if (!alive[pos] || r < 0) continue
            val m = merges[key(id[pos], id[r])] ?: continue
            if ((m and 0xFFFFFFFFL) != top[2]) continue  // stale: a neighbour merged since it was queued
            id[pos] = top[2].toInt()
            alive[r] = false
            next[pos] = next[r]
            if (next[r] >= 0) prev[next[r]] = pos
            if (prev[pos] >= 0) push(prev[pos])
            push(pos)
        }
        val out = ArrayList<Int>()
        var i = 0
        while (i >= 0 && i < n) { out.add(id[i]); i = next[i] }
        return out
    }
}

/** Qwen3's Split regex (Tokenizer.QWEN_PATTERN) with Oniguruma's semantics, by hand: at each
 *  position the first alternative that matches wins, quantifiers greedy with backtracking. Every
 *  code point is covered by some alternative, so the pieces are exactly the matches. */
internal object QwenSplit {
    fun pieces(text: String): List<String> {
        val cps = IntArray(text.codePointCount(0, text.length))
        var at = 0
        for (k in cps.indices) { cps[k] = text.codePointAt(at); at += Character.charCount(cps[k]) }
        val out = ArrayList<String>()
        var i = 0
        while (i < cps.size) {
            val len = matchAt(cps, i)
            out.add(String(cps, i, len))
            i += len
        }
        return out
    }

    private fun isSpace(c: Int) = UnicodeClass.isWhitespace(c)
    private fun isL(c: Int) = UnicodeClass.isLetter(c)
    private fun isN(c: Int) = UnicodeClass.isNumber(c)
    private fun isNewline(c: Int) = c == 0x0A || c == 0x0D

    /** The length (in code points, >= 1) of the match at [i]. */
    private fun matchAt(s: IntArray, i: Int): Int {
        contraction(s, i)?.let { return it }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        val c = s[i]
        if (!isNewline(c) && !isL(c) && !isN(c) && i + 1 < s.size && isL(s[i + 1])) return 1 + run(s, i + 1, ::isL)
        if (isL(c)) return run(s, i, ::isL)
        // \p{N}
        if (isN(c)) return 1
        // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
        val other = { x: Int -> !isSpace(x) && !isL(x) && !isN(x) }
        val start = if (c == 0x20 && i + 1 < s.size && other(s[i + 1])) i + 1 else i
        if (other(s[start])) {
            val end = start + run(s, start, other)
            return end - i + run(s, end, ::isNewline)
        }
        // whitespace from here on: \s*[\r\n]+ (up to the run's last newline), \s+(?!\S), \s+
        val ws = run(s, i, ::isSpace)
        var lastNewline = -1
        for (k in i until i + ws) if (isNewline(s[k])) lastNewline = k
        if (lastNewline >= 0) return lastNewline + 1 - i
        if (i + ws == s.size || ws == 1) return ws
        return ws - 1
    }

    /** (?i:'s|'t|'re|'ve|'m|'ll|'d), with Unicode case folding ('ſ' folds to 's', 'K' is no k here). */
    private fun contraction(s: IntArray, i: Int): Int? {
        if (s[i] != '\''.code || i + 1 >= s.size) return null
        fun at(k: Int, vararg options: Char) = i + k < s.size && options.any { s[i + k] == it.code }
        return when {
            at(1, 's', 'S', '\u017F') -> 2
            at(1, 't', 'T') -> 2
            at(1, 'r', 'R') && at(2, 'e', 'E') -> 3
            at(1, 'v', 'V') && at(2, 'e', 'E') -> 3
            at(1, 'm', 'M') -> 2
            at(1, 'l', 'L') && at(2, 'l', 'L') -> 3
            at(1, 'd', 'D') -> 2
            else -> null
        }
    }

    private inline fun run(s: IntArray, from: Int, test: (Int) -> Boolean): Int {
        var k = from
        while (k < s.size && test(s[k])) k++
        return k - from
    }
}
