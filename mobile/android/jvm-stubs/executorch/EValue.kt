// Compile-only declaration of org.pytorch.executorch.EValue as published in executorch-android
// 1.5.1: pytorch/executorch, extension/android/executorch_android/src/main/java/org/pytorch/executorch/EValue.kt
// (a Kotlin class since v1.4.0; identical at v1.4.1 and on main after the 1.5 release). Only the members the app uses.
package org.pytorch.executorch

class EValue private constructor(val mTypeCode: Int) {
    fun toTensor(): Tensor = TODO("compile-only stub")

    companion object {
        @JvmStatic
        fun from(tensor: Tensor): EValue = TODO("compile-only stub")
    }
}
