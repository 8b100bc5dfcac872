// The relevance model in the ExecuTorch Android runtime (org.pytorch:executorch-android), and the
// photo -> `image` tensor step that contract.json describes: the photo as decoded, EXIF orientation
// applied, alpha dropped, uint8 [1,H,W,3] RGB at its own size (pipeline.golden.load_photo). No crop,
// no resize, no float conversion: the .pte does arr-coc-0-1's resize to 16G itself.
package org.arrcoc.demo

import android.content.Context
import android.graphics.Bitmap
import android.graphics.BitmapFactory
import androidx.exifinterface.media.ExifInterface
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor
import java.io.InputStream
import java.nio.ByteBuffer

/** One sample's outputs: relevance [num_patches], top-K patch indices [top_k], weights [3]. */
class Prediction(val relevance: FloatArray, val topk: IntArray, val weights: FloatArray)

/** The photo as the model takes it: [height * width * 3] bytes, RGB, rows top to bottom, in a
 *  direct native-order buffer (Tensor.allocateByteBuffer) that the uint8 tensor uses without a copy. */
class Photo(val rgb: ByteBuffer, val height: Int, val width: Int)
class RelevanceModel private constructor(val entry: ArtifactEntry, private val module: Module) : AutoCloseable {

    /** Runs one photo (batch 1, its own size) with `query` [query_dim]. */
    fun predict(photo: Photo, query: FloatArray): Prediction {
        val imageSpec = entry.imageInput
        val querySpec = entry.queryInput
        require(photo.rgb.capacity() == photo.height * photo.width * 3) { "photo has ${photo.rgb.capacity()} bytes, not ${photo.height} x ${photo.width} x 3" }
        require(query.size == querySpec.numelPerSample) { "query has ${query.size} values, ${querySpec.name} takes ${querySpec.numelPerSample}" }
        val out = module.forward(
            // uint8 [1, H, W, 3]: the batch, then the photo's own height and width
            EValue.from(Tensor.fromBlobUnsigned(photo.rgb, imageSpec.shapeFor(1, photo.height, photo.width))),
            EValue.from(Tensor.fromBlob(query, querySpec.shapeFor(1))),
        )
        if (out.size != entry.outputs.size) {
            throw ContractException("${entry.file} returned ${out.size} outputs, contract.json lists ${entry.outputs.size}")
        }
        val topkTensor = out[1].toTensor()
        val topk = when (entry.topkOutput.dtype) {
            "int64" -> topkTensor.getDataAsLongArray().map { it.toInt() }.toIntArray()
            "int32" -> topkTensor.getDataAsIntArray()
            else -> throw ContractException("${entry.topkOutput.name} dtype ${entry.topkOutput.dtype} is not supported")
        }
        return Prediction(out[0].toTensor().getDataAsFloatArray(), topk, out[2].toTensor().getDataAsFloatArray())
    }

    override fun close() = module.destroy()

    companion object {
        /** Loads the artifact `key` of the contract (copied out of the APK, checked by sha256). */
        fun open(context: Context, contract: Contract, key: String): RelevanceModel {
            val entry = contract.artifacts[key] ?: throw ContractException("no artifact '$key' in contract.json")
            if (entry.imageInput.dtype != "uint8") {
                throw ContractException("${entry.imageInput.name} is ${entry.imageInput.dtype}; the app hands over uint8 photos")
            }
            val floats = listOf(entry.queryInput, entry.relevanceOutput, entry.weightsOutput)
            floats.firstOrNull { it.dtype != "float32" }?.let {
                throw ContractException("${it.name} is ${it.dtype}; the app feeds and reads float32")
            }
            val file = contract.artifactFile(context, entry)
            return RelevanceModel(entry, Module.load(file.absolutePath))
        }
    }
}

/** How the upright photo reads the stored pixels for one EXIF orientation: upright pixel (r, c)
 *  reads stored pixel (a, b) with a = if (transpose) c else r, b = if (transpose) r else c, then
 *  a = storedHeight - 1 - a if flipRows and b = storedWidth - 1 - b if flipCols. A pure re-indexing:
 *  every byte is copied, none is blended. */
data class Orientation(val transpose: Boolean, val flipRows: Boolean, val flipCols: Boolean)

object Preprocess {
    /** EXIF TAG_ORIENTATION value -> Orientation; PIL's ImageOps.exif_transpose does the same
     *  (tests/test_android.py checks this table against PIL for all eight values). */
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

    /** The photo's EXIF orientation (1 when it has none). `open` must return a fresh stream. */
    fun exifOrientation(open: () -> InputStream): Int = open().use {
        ExifInterface(it).getAttributeInt(ExifInterface.TAG_ORIENTATION, ExifInterface.ORIENTATION_NORMAL)
    }

    /**
     * The `image` tensor of one photo, per contract.preprocessing: decoded at its full size
     * (no subsampling, no density scaling), not premultiplied (a translucent pixel keeps its
     * stored colour, as PIL's convert("RGB")), read with copyPixelsToBuffer (the decoder's own
     * RGBA bytes, in the colour space the photo was encoded in; Bitmap's per-pixel int reads would
     * convert to sRGB and pack ARGB ints), then re-indexed upright per EXIF with alpha dropped.
     * `open` must return a fresh stream on each call.
     */
    fun decodePhoto(open: () -> InputStream, pre: Preprocessing): Photo {
        if (pre.layout != "NHWC" || !pre.dtype.startsWith("uint8")) {
            throw ContractException("preprocessing ${pre.layout}/${pre.dtype} is not what this app implements")
        }
        // the size first (no pixels decoded): a photo outside the range fails before it fills memory
        val bounds = BitmapFactory.Options().apply { inJustDecodeBounds = true }
        open().use { BitmapFactory.decodeStream(it, null, bounds) }
        if (bounds.outWidth <= 0 || bounds.outHeight <= 0) throw IllegalArgumentException("not an image")
        checkSize(bounds.outHeight, bounds.outWidth, pre) // the same range per side, so rotation does not matter
        val bitmap = open().use {
            BitmapFactory.decodeStream(it, null, BitmapFactory.Options().apply {
                inPreferredConfig = Bitmap.Config.ARGB_8888
                inPremultiplied = false
                inScaled = false
            })
        } ?: throw IllegalArgumentException("not an image")
        try {
            if (bitmap.config != Bitmap.Config.ARGB_8888) {
                throw IllegalArgumentException("decoded as ${bitmap.config}, not ARGB_8888")
            }
            // ARGB_8888 lies in memory as R, G, B, A bytes; rows rowBytes apart
            val rgba = ByteBuffer.allocateDirect(bitmap.rowBytes * bitmap.height)
            bitmap.copyPixelsToBuffer(rgba)
            return upright(rgba, bitmap.height, bitmap.width, bitmap.rowBytes, exifOrientation(open))
        } finally {
            bitmap.recycle()
        }
    }

    fun checkSize(height: Int, width: Int, pre: Preprocessing) {
        if (minOf(width, height) < pre.minSide || maxOf(width, height) > pre.maxSide) {
            throw IllegalArgumentException("the photo is ${width}x$height; the model takes ${pre.minSide} to ${pre.maxSide} pixels per side")
        }
    }

    /** Stored RGBA bytes (storedHeight rows, `stride` bytes apart) -> the upright photo's RGB bytes,
     *  HWC, alpha dropped: uint8 [1,H,W,3] with H and W swapped for a transposing orientation. */
    fun upright(rgba: ByteBuffer, storedHeight: Int, storedWidth: Int, stride: Int, exif: Int): Photo {
        val o = ORIENTATIONS[exif] ?: ORIENTATIONS.getValue(1)
        val h = if (o.transpose) storedWidth else storedHeight
        val w = if (o.transpose) storedHeight else storedWidth
        val rgb = Tensor.allocateByteBuffer(h * w * 3)
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
