// Compile-only declaration of org.pytorch.executorch.Tensor as published in executorch-android
// 1.5.1: pytorch/executorch, extension/android/executorch_android/src/main/java/org/pytorch/executorch/Tensor.kt
// (a Kotlin class since v1.4.0; identical at v1.4.1 and on main after the 1.5 release, so at 1.5.1).
// Only the members the app uses; the array getters are Kotlin properties upstream.
package org.pytorch.executorch

import java.nio.ByteBuffer

abstract class Tensor internal constructor(shape: LongArray) {
    fun shape(): LongArray = TODO("compile-only stub")
    open val dataAsUnsignedByteArray: ByteArray get() = TODO("compile-only stub")
    open val dataAsIntArray: IntArray get() = TODO("compile-only stub")
    open val dataAsFloatArray: FloatArray get() = TODO("compile-only stub")
    open val dataAsLongArray: LongArray get() = TODO("compile-only stub")

    companion object {
        @JvmStatic
        fun allocateByteBuffer(numElements: Int): ByteBuffer = TODO("compile-only stub")

        @JvmStatic
        fun fromBlob(data: FloatArray, shape: LongArray): Tensor = TODO("compile-only stub")

        @JvmStatic
        fun fromBlob(data: LongArray, shape: LongArray): Tensor = TODO("compile-only stub")

        @JvmStatic
        fun fromBlobUnsigned(data: ByteBuffer, shape: LongArray): Tensor = TODO("compile-only stub")
    }
}
