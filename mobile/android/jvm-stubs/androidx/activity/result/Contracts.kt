// Compile-only declarations of androidx.activity 1.9.3's androidx.activity.result.contract package (Google
// Maven only): androidx/androidx, activity/activity/src/main/java/androidx/activity/result/contract/
// {ActivityResultContract,ActivityResultContracts}.kt. Only what the app uses.
@file:Suppress("unused", "UNUSED_PARAMETER")

package androidx.activity.result.contract

import android.content.Context
import android.content.Intent
import android.net.Uri
import androidx.activity.result.PickVisualMediaRequest

abstract class ActivityResultContract<I, O> {
    abstract fun createIntent(context: Context, input: I): Intent
    abstract fun parseResult(resultCode: Int, intent: Intent?): O
}

class ActivityResultContracts private constructor() {
    open class PickVisualMedia : ActivityResultContract<PickVisualMediaRequest, Uri?>() {
        override fun createIntent(context: Context, input: PickVisualMediaRequest): Intent = TODO("compile-only stub")
        override fun parseResult(resultCode: Int, intent: Intent?): Uri? = TODO("compile-only stub")

        sealed interface VisualMediaType
        object ImageOnly : VisualMediaType
        object ImageAndVideo : VisualMediaType
    }
}
