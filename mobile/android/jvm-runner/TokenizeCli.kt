// TokenizeCli TOKENIZER_JSON TEXT_FILE MAX_LENGTH|none: the app's Tokenizer (app/src/main) on every
// line of a UTF-8 text file (split on "\n" only; a final "\n" ends the last line), one JSON array of
// ids per line on stdout. Run by `invoke app-tokenize --app android` (targets/app_tokenize.py) with
// the classes targets/android/app.py compiles; never in the APK (Gradle does not compile jvm-runner).
// Exit 2: bad input (the tokenizer refused, an unreadable file), with one line on stderr.
package org.arrcoc.jvmrunner

import org.arrcoc.demo.Tokenizer
import java.io.File
import kotlin.system.exitProcess

object TokenizeCli {
    @JvmStatic
    fun main(args: Array<String>) {
        if (args.size != 3) fail("usage: TokenizeCli TOKENIZER_JSON TEXT_FILE MAX_LENGTH|none")
        val maxLength = if (args[2] == "none") null else args[2].toIntOrNull() ?: fail("MAX_LENGTH must be a number or none, not ${args[2]}")
        val tokenizer = try {
            Tokenizer.fromJson(File(args[0]).readText(Charsets.UTF_8), maxLength)
        } catch (e: IllegalArgumentException) {
            fail(e.message ?: e.toString())
        } catch (e: java.io.IOException) {
            fail("cannot read ${args[0]}: ${e.message}")
        }
        val text = String(File(args[1]).readBytes(), Charsets.UTF_8)
        val lines = if (text.isEmpty()) emptyList() else text.removeSuffix("\n").split("\n")
        val out = StringBuilder()
        for (line in lines) out.append(tokenizer.encode(line).joinToString(",", "[", "]")).append('\n')
        System.out.write(out.toString().toByteArray(Charsets.UTF_8))
        System.out.flush()
    }

    private fun fail(message: String): Nothing {
        System.err.println(message.lineSequence().first())
        exitProcess(2)
    }
}
