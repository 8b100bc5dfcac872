// The photo as the model takes it (contract.json `preprocessing`: uint8 [1,H,W,3], RGB, rows top to
// bottom, the photo's own size) and the EXIF re-indexing that makes stored pixels upright. Plain
// Kotlin on byte buffers: the JVM tests hold the re-indexing to PIL's ImageOps.exif_transpose for all
// eight orientations; the decoder that fills the buffer (BitmapFactory) is RelevanceModel.kt's.
package org.arrcoc.demo

import java.nio.ByteBuffer
import java.nio.ByteOrder

/** [height * width * 3] bytes, RGB, rows top to bottom, in a direct native-order buffer: the kind
 *  ExecuTorch's Tensor.fromBlobUnsigned takes without a copy (Tensor.allocateByteBuffer makes the same). */
class Photo(val rgb: ByteBuffer, val height: Int, val width: Int)

fun photoBuffer(bytes: Int): ByteBuffer = ByteBuffer.allocateDirect(bytes).order(ByteOrder.nativeOrder())

/** How the upright photo reads the stored pixels for one EXIF orientation: upright pixel (r, c)
 *  reads stored pixel (a, b) with a = if (transpose) c else r, b = if (transpose) r else c, then
 *  a = storedHeight - 1 - a if flipRows and b = storedWidth - 1 - b if flipCols. A pure re-indexing:
 *  every byte is copied, none is blended. */
data class Orientation(val transpose: Boolean, val flipRows: Boolean, val flipCols: Boolean)

object Upright {
    /** EXIF TAG_ORIENTATION value -> Orientation, as PIL's ImageOps.exif_transpose applies it. */
    val ORIENTATIONS: Map<Int, Orientation> = mapOf(
        1 to Orientation(false, false, false), // ORIENTATION_NORMAL
        2 to Orientation(false, false, true), // ORIENTATION_FLIP_HORIZONTAL
        3 to Orientation(false, true, true), // ORIENTATION_ROTATE_180
        4 to Orientation(false, true, false), // ORIENTATION_FLIP_VERTICAL
        5 to Orientation(true, false, false), // ORIENTATION_TRANSPOSE
        6 to Orientation(true, true, false), // ORIENTATION_ROTATE_90 (clockwise)
        7 to Orientation(true, true, true), // ORIENTATION_TRANSVERSE
        8 to Orientation(true, false, true), // ORIENTATION_ROTATE_270
    )

    fun checkSize(height: Int, width: Int, pre: Preprocessing) {
        if (minOf(width, height) < pre.minSide || maxOf(width, height) > pre.maxSide) {
            throw IllegalArgumentException("the photo is ${width}x$height; the model takes ${pre.minSide} to ${pre.maxSide} pixels per side")
        }
    }

    /** Stored RGBA bytes (storedHeight rows, `stride` bytes apart) -> the upright photo's RGB bytes,
     *  HWC, alpha dropped: uint8 [1,H,W,3] with H and W swapped for a transposing orientation.
     *  An unknown EXIF value reads as 1 (upright), as PIL leaves such a photo alone. */
    fun rgb(rgba: ByteBuffer, storedHeight: Int, storedWidth: Int, stride: Int, exif: Int): Photo {
        val o = ORIENTATIONS[exif] ?: ORIENTATIONS.getValue(1)
        val h = if (o.transpose) storedWidth else storedHeight
        val w = if (o.transpose) storedHeight else storedWidth
        val rgb = photoBuffer(h * w * 3)
        var out = 0
        for (r in 0 until h) {
            for (c in 0 until w) {
                var a = if (o.transpose) c else r
                var b = if (o.transpose) r else c
                if (o.flipRows) a = storedHeight - 1 - a
                if (o.flipCols) b = storedWidth - 1 - b
                val s = a * stride + b * 4
                rgb.put(out, rgba.get(s)) // R
                rgb.put(out + 1, rgba.get(s + 1)) // G
                rgb.put(out + 2, rgba.get(s + 2)) // B; the alpha byte (s + 3) is dropped
                out += 3
            }
        }
        return Photo(rgb, h, w)
    }
}
