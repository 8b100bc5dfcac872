// Where the JVM tests find what the build wrote. `./gradlew test` runs from app/, so the assets
// default to Gradle's own folder (filled by `invoke build --target android`); targets/android/app.py
// points both properties at the bundle it has just staged and at the fixtures it derived from it.
package org.arrcoc.demo

import org.json.JSONObject
import org.junit.Assume.assumeTrue
import java.io.File

object Fixtures {
    /** contract.json and the files it names (-Darrcoc.assets; default: app/src/main/assets). */
    val assets = File(System.getProperty("arrcoc.assets") ?: "src/main/assets")

    /** Outputs of the .pte files in ExecuTorch's Python runtime, perturbed copies and PIL's EXIF
     *  results, each with pipeline/stages/parity.py's numbers (-Darrcoc.fixtures; written by the build). */
    val dir: File? = System.getProperty("arrcoc.fixtures")?.let { File(it) }

    fun contract(): Contract {
        val file = File(assets, Contract.FILE_NAME)
        check(file.isFile) { "$file is missing: run `invoke build --target android` (or pass -Darrcoc.assets=DIR)" }
        return Contract.parse(file.readText())
    }

    fun bundle(folder: File, json: String, bin: String) =
        GoldenBundle(File(folder, json).readText(), File(folder, bin).readBytes())

    fun golden(contract: Contract) = bundle(assets, contract.golden.json, contract.golden.bin)

    /** The build's fixtures. Gradle runs without them, and JUnit reports these tests as skipped
     *  there; targets/android/app.py always passes them and fails on any skipped test. */
    fun fixtures(name: String): File {
        val d = dir
        assumeTrue("no -Darrcoc.fixtures: pipeline/stages/parity.py's numbers come from `invoke build --target android`", d != null)
        return File(d!!, name)
    }

    fun json(file: File) = JSONObject(file.readText())
}
