// The APK side of the contract: contract.json and the files it names are read out of the app's
// assets (Gradle's default folder, filled by `invoke build --target android`), and a .pte is copied
// to a plain file because Module.load takes a path. The parsing and checks they feed are plain
// Kotlin (Contract.kt, Golden.kt) and run on the JVM in the tests.
package org.arrcoc.demo

import android.content.Context
import java.io.File
import java.io.IOException
import java.io.InputStream

fun Contract.Companion.load(context: Context): Contract {
    val text = try {
        context.assets.open(Contract.FILE_NAME).bufferedReader().use { it.readText() }
    } catch (e: IOException) {
        throw ContractException("assets/${Contract.FILE_NAME} is missing: run `invoke build --target android` first")
    }
    return Contract.parse(text)
}

/** A file the contract names, from the APK's assets. */
fun Contract.openAsset(context: Context, name: String): InputStream = context.assets.open(name)

/** A (small) asset the contract names, its bytes checked against contract.json's `files`. */
fun Contract.checkedAsset(context: Context, name: String): ByteArray =
    checkBundleFile(name, openAsset(context, name).use { it.readBytes() })

/** The golden bundle the contract names, from the APK's assets, each file checked. */
fun Contract.goldenBundle(context: Context): GoldenBundle = GoldenBundle(
    checkedAsset(context, golden.json).toString(Charsets.UTF_8),
    checkedAsset(context, golden.bin),
)

/**
 * An artifact as a plain file (Module.load takes a path, and APK assets are not files): copied
 * once into the app's files folder, then checked against the contract's bytes and sha256.
 */
fun Contract.artifactFile(context: Context, entry: ArtifactEntry): File =
    checkedFile(context, entry.file, entry.bytes, entry.sha256)

/** Any asset the contract names with its bytes and sha256 (a .pte, tokenizer.json), as a checked plain file. */
fun Contract.checkedFile(context: Context, file: String, bytes: Long, sha256: String): File {
    val dest = File(context.filesDir, "models/${sha256.take(16)}-$file")
    if (!dest.isFile || dest.length() != bytes) {
        dest.parentFile?.mkdirs()
        val tmp = File(dest.path + ".tmp")
        openAsset(context, file).use { input -> tmp.outputStream().use { input.copyTo(it) } }
        check(tmp.renameTo(dest)) { "could not write ${dest.path}" }
    }
    try {
        checkFileBytes(file, bytes, sha256, dest.length(), dest.inputStream().use { sha256Hex(it) })
    } catch (e: ContractException) {
        dest.delete()
        throw e
    }
    return dest
}

/** Runs the golden bundle through every artifact of the contract in the ExecuTorch runtime and holds
 *  each to its own gate. */
fun GoldenCheck.run(context: Context, contract: Contract): List<GoldenCheck.Result> {
    val golden = contract.goldenBundle(context)
    return contract.artifacts.values.map { entry ->
        RelevanceModel.open(context, contract, entry.key).use { model ->
            judge(golden, entry) { _, photo, query -> model.predict(photo, query) }
        }
    }
}
