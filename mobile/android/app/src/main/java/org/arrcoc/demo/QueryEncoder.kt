// A typed query on the phone: the app's tokenizer (Tokenizer.kt, reading the build's tokenizer.json)
// -> the query encoder .pte in ExecuTorch -> the embedding RelevanceModel takes as its query.
// contract.json's typed_text names both files (bytes, sha256), the encoder's input shape and its
// lengths; targets/app_encoder.py verified the encoder in ExecuTorch's Python runtime at build time.
// TypedQuery is plain Kotlin (JVM-tested); QueryEncoder is the ExecuTorch shell around it.
package org.arrcoc.demo

import android.content.Context
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor

class QueryException(message: String) : RuntimeException(message)

object TypedQuery {
    /** A query with something to read: one code point that is not white space, a format character
     *  (zero-width spaces and joiners, a BOM, direction marks) or a control character. The tokenizer
     *  drops all of those, so such a query would ask the model about nothing (predict refuses it too). */
    fun checkText(text: String) {
        var i = 0
        while (i < text.length) {
            val cp = text.codePointAt(i)
            val type = Character.getType(cp)
            val invisible = Character.isWhitespace(cp) || Character.isSpaceChar(cp) ||
                type == Character.FORMAT.toInt() || type == Character.CONTROL.toInt()
            if (!invisible) return
            i += Character.charCount(cp)
        }
        throw QueryException("the query has no visible characters (only invisible ones such as zero-width spaces): type a question")
    }

    /** The encoder's input for one query's ids: int64, held to the contract's lengths. */
    fun encoderIds(spec: EncoderSpec, ids: IntArray): LongArray {
        if (ids.size < spec.minLength) throw QueryException("the query has no tokens: type a question")
        if (ids.size > spec.maxLength) {
            throw QueryException("the query has ${ids.size} tokens; the encoder takes at most ${spec.maxLength}: type a shorter one")
        }
        return LongArray(ids.size) { ids[it].toLong() }
    }

    /** The tokenizer the app built from tokenizer.json is the kind the contract names (a WordPiece
     *  file with a byte-level encoder, or the reverse, would give ids the encoder never saw). */
    fun checkTokenizer(spec: TokenizerSpec, kind: String, maxLength: Int?) {
        if (kind != spec.kind || maxLength != spec.maxLength) {
            throw ContractException("${spec.file} reads as a $kind tokenizer cutting at $maxLength; contract.json says " +
                "${spec.kind}, cutting at ${spec.maxLength}: rebuild the app's assets")
        }
    }
}

/** The tokenizer and the encoder .pte of contract.typed_text, loaded once. */
class QueryEncoder private constructor(
    private val typed: TypedText,
    private val tokenizer: Tokenizer,
    private val module: Module,
) : AutoCloseable {
    class Encoded(val ids: IntArray, val embedding: FloatArray, val tokenizeMs: Double, val encodeMs: Double)

    fun encode(text: String): Encoded {
        val spec = typed.encoder!!
        TypedQuery.checkText(text)
        val t0 = System.nanoTime()
        val ids = tokenizer.encode(text)
        val t1 = System.nanoTime()
        val input = TypedQuery.encoderIds(spec, ids)
        val out = module.execute(spec.method, EValue.from(Tensor.fromBlob(input, spec.input.shapeFor(ids.size))))
        val embedding = out[0].toTensor().dataAsFloatArray
        val t2 = System.nanoTime()
        if (embedding.size != spec.output.numelPerSample) {
            throw ContractException("${spec.file} returned ${embedding.size} values, contract.json says ${spec.output.numelPerSample}")
        }
        return Encoded(ids, embedding, (t1 - t0) / 1e6, (t2 - t1) / 1e6)
    }

    override fun close() = module.destroy()

    companion object {
        fun open(context: Context, contract: Contract): QueryEncoder {
            val typed = contract.typedText
            if (!typed.supported) throw ContractException("typed queries are not supported by this build: ${typed.why}")
            val tok = typed.tokenizer!!
            val enc = typed.encoder!!
            val json = contract.checkedFile(context, tok.file, tok.bytes, tok.sha256).readText()
            val tokenizer = Tokenizer.fromJson(json, tok.maxLength)
            TypedQuery.checkTokenizer(tok, tokenizer.kind, tokenizer.maxLength)
            val module = Module.load(contract.checkedFile(context, enc.file, enc.bytes, enc.sha256).absolutePath)
            return QueryEncoder(typed, tokenizer, module)
        }
    }
}
