// The relevance model in the ExecuTorch Android runtime (org.pytorch:executorch-android), and the
// photo -> `image` tensor step that contract.json describes: the photo as decoded, EXIF orientation
// applied, alpha dropped, uint8 [1,H,W,3] RGB at its own size (arrcoc_edge.stages.golden.load_photo). No crop,
// no resize, no float conversion: the .pte does arr-coc-0-1's resize to 16G itself. The Android shell
// around Photo.kt's re-indexing: the decoder (BitmapFactory, ExifInterface) and the runtime (ExecuTorch).
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

class RelevanceModel private constructor(
    val entry: ArtifactEntry,
    private val module: Module,
    /** contract.model.image_size (16·G): the photo size the square method takes as is. */
    private val imageSize: Int,
) : AutoCloseable {

    /** Runs one photo (batch 1, its own size) with `query` [query_dim]. */
    fun predict(photo: Photo, query: FloatArray): Prediction {
        val imageSpec = entry.imageInput
        val querySpec = entry.queryInput
        require(photo.rgb.capacity() == photo.height * photo.width * 3) { "photo has ${photo.rgb.capacity()} bytes, not ${photo.height} x ${photo.width} x 3" }
        require(query.size == querySpec.numelPerSample) { "query has ${query.size} values, ${querySpec.name} takes ${querySpec.numelPerSample}" }
        // the .pte's method for a photo of exactly the model's input size, when it has one: same
        // numbers as forward there, without the resize (issue 30: 0.39 -> 0.19 ms on one x86 core)
        val method = entry.squareMethod?.takeIf { photo.height == imageSize && photo.width == imageSize } ?: "forward"
        val out = module.execute(
            method,
            // uint8 [1, H, W, 3]: the batch, then the photo's own height and width
            EValue.from(Tensor.fromBlobUnsigned(photo.rgb, imageSpec.shapeFor(1, photo.height, photo.width))),
            EValue.from(Tensor.fromBlob(query, querySpec.shapeFor(1))),
        )
        if (out.size != entry.outputs.size) {
            throw ContractException("${entry.file} returned ${out.size} outputs, contract.json lists ${entry.outputs.size}")
        }
        val topkTensor = out[1].toTensor()
        val topk = when (entry.topkOutput.dtype) {
            // Kotlin properties since executorch-android 1.4 (Tensor.kt), not Java getters
            "int64" -> topkTensor.dataAsLongArray.map { it.toInt() }.toIntArray()
            "int32" -> topkTensor.dataAsIntArray
            else -> throw ContractException("${entry.topkOutput.name} dtype ${entry.topkOutput.dtype} is not supported")
        }
        return Prediction(out[0].toTensor().dataAsFloatArray, topk, out[2].toTensor().dataAsFloatArray,
                          out[3].toTensor().dataAsFloatArray)
    }

    override fun close() = module.destroy()

    companion object {
        /** Loads the artifact `key` of the contract (copied out of the APK, checked by sha256). */
        fun open(context: Context, contract: Contract, key: String): RelevanceModel {
            val entry = contract.artifacts[key] ?: throw ContractException("no artifact '$key' in contract.json")
            if (entry.imageInput.dtype != "uint8") {
                throw ContractException("${entry.imageInput.name} is ${entry.imageInput.dtype}; the app hands over uint8 photos")
            }
            val floats = listOf(entry.queryInput, entry.relevanceOutput, entry.weightsOutput, entry.evidenceOutput)
            floats.firstOrNull { it.dtype != "float32" }?.let {
                throw ContractException("${it.name} is ${it.dtype}; the app feeds and reads float32")
            }
            val file = contract.artifactFile(context, entry)
            return RelevanceModel(entry, Module.load(file.absolutePath), contract.model.imageSize)
        }
    }
}

object Preprocess {
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
        Upright.checkSize(bounds.outHeight, bounds.outWidth, pre) // the same range per side, so rotation does not matter
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
            return Upright.rgb(rgba, bitmap.height, bitmap.width, bitmap.rowBytes, exifOrientation(open))
        } finally {
            bitmap.recycle()
        }
    }
}
