// Compile-only declarations of the androidx.activity 1.9.3 API the app calls (Google Maven only):
// androidx/androidx, activity/activity/src/main/java/androidx/activity/ComponentActivity.kt and
// .../androidx/activity/result/{ActivityResultCallback,ActivityResultLauncher,PickVisualMediaRequest}.kt,
// .../androidx/activity/result/contract/{ActivityResultContract,ActivityResultContracts}.kt.
// Only the members the app uses; upstream's ComponentActivity sits on androidx.core's, here on Activity.
@file:Suppress("unused", "UNUSED_PARAMETER")

package androidx.activity

import androidx.activity.result.ActivityResultCallback
import androidx.activity.result.ActivityResultLauncher
import androidx.activity.result.contract.ActivityResultContract

open class ComponentActivity : android.app.Activity() {
    fun <I, O> registerForActivityResult(
        contract: ActivityResultContract<I, O>,
        callback: ActivityResultCallback<O>,
    ): ActivityResultLauncher<I> = TODO("compile-only stub")
}
