// Compile-only declaration of androidx.exifinterface 1.3.7's ExifInterface (Google Maven only):
// androidx/androidx, exifinterface/exifinterface/src/main/java/androidx/exifinterface/media/ExifInterface.java.
// Only the members the app uses (upstream is a Java class: its constants are static fields).
@file:Suppress("unused", "UNUSED_PARAMETER")

package androidx.exifinterface.media

import java.io.InputStream

class ExifInterface(inputStream: InputStream) {
    fun getAttributeInt(tag: String, defaultValue: Int): Int = TODO("compile-only stub")

    companion object {
        const val TAG_ORIENTATION = "Orientation"
        const val ORIENTATION_NORMAL = 1
    }
}
