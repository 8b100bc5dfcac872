// Compile-only declaration of org.pytorch.executorch.Module as published in executorch-android
// 1.5.1: pytorch/executorch, extension/android/executorch_android/src/main/java/org/pytorch/executorch/Module.kt
// (a Kotlin class since v1.4.0; the members below are the same at v1.4.1 and on main after the 1.5
// release, which only adds a load overload taking backend options). Only the members the app uses.
package org.pytorch.executorch

import java.io.Closeable

open class Module private constructor() : Closeable {
    open fun forward(vararg inputs: EValue): Array<EValue> = TODO("compile-only stub")
    open fun execute(methodName: String, vararg inputs: EValue): Array<EValue> = TODO("compile-only stub")
    open fun destroy(): Unit = TODO("compile-only stub")
    override fun close(): Unit = TODO("compile-only stub")

    companion object {
        const val LOAD_MODE_FILE = 0

        @JvmStatic
        @JvmOverloads
        fun load(modelPath: String?, loadMode: Int = LOAD_MODE_FILE, numThreads: Int = 0): Module =
            TODO("compile-only stub")
    }
}
