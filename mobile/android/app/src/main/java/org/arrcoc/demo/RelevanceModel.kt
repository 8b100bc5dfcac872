// The relevance model in the ExecuTorch Android runtime (org.pytorch:executorch-android), and the
// photo -> `image` tensor preprocessing that contract.json describes (the same steps as
// pipeline.golden.load_image_file: EXIF orientation, centre square crop, resize, alpha on white,
// RGB, x * scale, NCHW float32).
package org.arrcoc.demo

import android.content.Context
import android.graphics.Bitmap
import android.graphics.BitmapFactory
import android.graphics.Canvas
import android.graphics.Color
import android.graphics.Matrix
import android.graphics.Paint
import android.graphics.Rect
import androidx.exifinterface.media.ExifInterface
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor
import java.io.InputStream

/** One sample's outputs: relevance [num_patches], top-K patch indices [top_k], weights [3]. */
class Prediction(val relevance: FloatArray, val topk: IntArray, val weights: FloatArray)

class RelevanceModel private constructor(val entry: ArtifactEntry, private val module: Module) : AutoCloseable {

    /** Runs one sample: `image` is [3 * S * S] (NCHW, batch 1), `query` is [query_dim]. */
    fun predict(image: FloatArray, query: FloatArray): Prediction {
        val imageSpec = entry.imageInput
        val querySpec = entry.queryInput
        require(image.size == imageSpec.numelPerSample) { "image has ${image.size} values, ${imageSpec.name} takes ${imageSpec.numelPerSample}" }
        require(query.size == querySpec.numelPerSample) { "query has ${query.size} values, ${querySpec.name} takes ${querySpec.numelPerSample}" }
        val out = module.forward(
            EValue.from(Tensor.fromBlob(image, imageSpec.shapeFor(1))),
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
            val floats = listOf(entry.imageInput, entry.queryInput, entry.relevanceOutput, entry.weightsOutput)
            floats.firstOrNull { it.dtype != "float32" }?.let {
                throw ContractException("${it.name} is ${it.dtype}; the app feeds and reads float32")
            }
            val file = contract.artifactFile(context, entry)
            return RelevanceModel(entry, Module.load(file.absolutePath))
        }
    }
}

object Preprocess {
    /**
     * Decodes a photo upright (EXIF orientation applied), subsampled while decoding so that its
     * shorter edge stays at least `size` pixels. `open` must return a fresh stream on each call.
     */
    fun decodeUpright(open: () -> InputStream, size: Int): Bitmap {
        val bounds = BitmapFactory.Options().apply { inJustDecodeBounds = true }
        open().use { BitmapFactory.decodeStream(it, null, bounds) }
        if (bounds.outWidth <= 0 || bounds.outHeight <= 0) throw IllegalArgumentException("not an image")
        var sample = 1
        while (minOf(bounds.outWidth, bounds.outHeight) / (sample * 2) >= size) sample *= 2
        val bitmap = open().use {
            BitmapFactory.decodeStream(it, null, BitmapFactory.Options().apply {
                inSampleSize = sample
                inPreferredConfig = Bitmap.Config.ARGB_8888
            })
        } ?: throw IllegalArgumentException("not an image")
        val orientation = open().use {
            ExifInterface(it).getAttributeInt(ExifInterface.TAG_ORIENTATION, ExifInterface.ORIENTATION_NORMAL)
        }
        val m = Matrix()
        when (orientation) {
            ExifInterface.ORIENTATION_FLIP_HORIZONTAL -> m.postScale(-1f, 1f)
            ExifInterface.ORIENTATION_ROTATE_180 -> m.postRotate(180f)
            ExifInterface.ORIENTATION_FLIP_VERTICAL -> m.postScale(1f, -1f)
            ExifInterface.ORIENTATION_TRANSPOSE -> { m.postRotate(90f); m.postScale(-1f, 1f) }
            ExifInterface.ORIENTATION_ROTATE_90 -> m.postRotate(90f)
            ExifInterface.ORIENTATION_TRANSVERSE -> { m.postRotate(-90f); m.postScale(-1f, 1f) }
            ExifInterface.ORIENTATION_ROTATE_270 -> m.postRotate(270f)
            else -> return bitmap
        }
        return Bitmap.createBitmap(bitmap, 0, 0, bitmap.width, bitmap.height, m, true)
    }

    /** Centre square crop (side = shorter edge), resized to the contract's size, composited on white. */
    fun squareOnWhite(src: Bitmap, pre: Preprocessing): Bitmap {
        val w = pre.resize[1]
        val h = pre.resize[0]
        val side = minOf(src.width, src.height)
        val left = (src.width - side) / 2
        val top = (src.height - side) / 2
        val out = Bitmap.createBitmap(w, h, Bitmap.Config.ARGB_8888)
        val canvas = Canvas(out)
        canvas.drawColor(Color.WHITE) // alpha composited on white
        canvas.drawBitmap(src, Rect(left, top, left + side, top + side), Rect(0, 0, w, h),
            Paint(Paint.FILTER_BITMAP_FLAG or Paint.ANTI_ALIAS_FLAG))
        return out
    }

    /** RGB, x * scale, NCHW float32: the `image` tensor of one sample. */
    fun toTensor(square: Bitmap, pre: Preprocessing): FloatArray {
        if (pre.color != "RGB" || pre.layout != "NCHW" || pre.dtype != "float32") {
            throw ContractException("preprocessing ${pre.color}/${pre.layout}/${pre.dtype} is not what this app implements")
        }
        val w = square.width
        val h = square.height
        val pixels = IntArray(w * h)
        square.getPixels(pixels, 0, w, 0, 0, w, h)
        val plane = w * h
        val out = FloatArray(3 * plane)
        for (i in 0 until plane) {
            val p = pixels[i]
            out[i] = ((p shr 16) and 0xFF) * pre.scale
            out[plane + i] = ((p shr 8) and 0xFF) * pre.scale
            out[2 * plane + i] = (p and 0xFF) * pre.scale
        }
        return out
    }
}
