// The relevance model in the ExecuTorch Android runtime (org.pytorch:executorch-android), and the
// photo -> `image` tensor step that contract.json describes: the photo as decoded, EXIF orientation
// applied, alpha dropped, uint8 [1,H,W,3] RGB at its own size (pipeline.golden.load_photo). No crop,
// no resize, no float conversion: the .pte does arr-coc-0-1's resize to 16G itself.
package org.arrcoc.demo

import android.content.Context
import android.graphics.Bitmap
import android.graphics.BitmapFactory
import android.graphics.Matrix
import androidx.exifinterface.media.ExifInterface
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor
import java.io.InputStream

/** One sample's outputs: relevance [num_patches], top-K patch indices [top_k], weights [3]. */
class Prediction(val relevance: FloatArray, val topk: IntArray, val weights: FloatArray)

/** The photo as the model takes it: [height * width * 3] bytes, RGB, rows top to bottom. */
class Photo(val rgb: ByteArray, val height: Int, val width: Int)

class RelevanceModel private constructor(val entry: ArtifactEntry, private val module: Module) : AutoCloseable {

    /** Runs one photo (batch 1, its own size) with `query` [query_dim]. */
    fun predict(photo: Photo, query: FloatArray): Prediction {
        val imageSpec = entry.imageInput
        val querySpec = entry.queryInput
        require(photo.rgb.size == photo.height * photo.width * 3) { "photo has ${photo.rgb.size} bytes, not ${photo.height} x ${photo.width} x 3" }
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

object Preprocess {
    /**
     * Decodes a photo upright (EXIF orientation applied) at its full size. `premultiplied = false`
     * keeps the colour of transparent pixels as stored (the model's input: alpha dropped, as PIL's
     * convert("RGB") does); such a bitmap cannot be drawn, so the view decodes its own premultiplied
     * copy. `open` must return a fresh stream on each call.
     */
    fun decodeUpright(open: () -> InputStream, premultiplied: Boolean): Bitmap {
        val bitmap = open().use {
            BitmapFactory.decodeStream(it, null, BitmapFactory.Options().apply {
                inPreferredConfig = Bitmap.Config.ARGB_8888
                inPremultiplied = premultiplied
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
        // a rotation or flip by a multiple of 90 degrees moves pixels without resampling them
        return Bitmap.createBitmap(bitmap, 0, 0, bitmap.width, bitmap.height, m, false)
    }

    /** The photo's RGB bytes, HWC, alpha dropped: the `image` tensor of one sample. */
    fun toPhoto(bitmap: Bitmap, pre: Preprocessing): Photo {
        if (pre.layout != "NHWC" || !pre.dtype.startsWith("uint8")) {
            throw ContractException("preprocessing ${pre.layout}/${pre.dtype} is not what this app implements")
        }
        val w = bitmap.width
        val h = bitmap.height
        if (minOf(w, h) < pre.minSide || maxOf(w, h) > pre.maxSide) {
            throw IllegalArgumentException("the photo is ${w}x$h; the model takes ${pre.minSide} to ${pre.maxSide} pixels per side")
        }
        val rgb = ByteArray(w * h * 3)
        val row = IntArray(w)
        for (y in 0 until h) {
            // getPixels returns non-premultiplied ARGB ints: R, G and B are the stored colour
            bitmap.getPixels(row, 0, w, 0, y, w, 1)
            for (x in 0 until w) {
                val p = row[x]
                val o = (y * w + x) * 3
                rgb[o] = (p shr 16).toByte()
                rgb[o + 1] = (p shr 8).toByte()
                rgb[o + 2] = p.toByte()
            }
        }
        return Photo(rgb, h, w)
    }
}
