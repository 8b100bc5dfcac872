// Compile-only declarations of androidx.activity 1.9.3's androidx.activity.result package (Google Maven
// only): androidx/androidx, activity/activity/src/main/java/androidx/activity/result/
// {ActivityResultCallback,ActivityResultLauncher,PickVisualMediaRequest}.kt. Only what the app uses.
@file:Suppress("unused", "UNUSED_PARAMETER")

package androidx.activity.result

import androidx.activity.result.contract.ActivityResultContracts.PickVisualMedia.ImageAndVideo
import androidx.activity.result.contract.ActivityResultContracts.PickVisualMedia.VisualMediaType

fun interface ActivityResultCallback<O> {
    fun onActivityResult(result: O)
}

abstract class ActivityResultLauncher<I> {
    open fun launch(input: I): Unit = TODO("compile-only stub")
}

class PickVisualMediaRequest internal constructor()

fun PickVisualMediaRequest(mediaType: VisualMediaType = ImageAndVideo): PickVisualMediaRequest =
    TODO("compile-only stub")
