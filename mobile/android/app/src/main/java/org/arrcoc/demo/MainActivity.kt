// One screen, plain Views: bundled sample or a picked photo, a typed query (when the build shipped
// the tokenizer and query encoder: contract.json typed_text) or a preset query, a model variant; the
// relevance heatmap with the strongest cells outlined, the verdict (Verdict.kt: the evidence output through
// the build's calibration, or "no calibration in this folder"), and the weights of the three ways of knowing.
// A typed query goes tokenizer -> encoder .pte -> relevance .pte, each step timed; the presets'
// embeddings need neither and stay the fallback.
// "Self-check" runs the golden bundle through every artifact on this device (as GoldenParityTest).
package org.arrcoc.demo

import android.content.Context
import android.graphics.Bitmap
import android.graphics.BitmapFactory
import android.graphics.Canvas
import android.graphics.Color
import android.graphics.Matrix
import android.graphics.Paint
import android.graphics.RectF
import android.net.Uri
import android.os.Bundle
import android.view.View
import android.widget.AdapterView
import android.widget.ArrayAdapter
import android.widget.Button
import android.widget.EditText
import android.widget.LinearLayout
import android.widget.Spinner
import android.widget.TextView
import androidx.activity.ComponentActivity
import androidx.activity.result.PickVisualMediaRequest
import androidx.activity.result.contract.ActivityResultContracts
import java.util.Locale
import java.util.concurrent.Executors

class MainActivity : ComponentActivity() {
    companion object {
        const val DISPLAY_MAX_SIDE = 2048
    }

    private val worker = Executors.newSingleThreadExecutor()
    private var contract: Contract? = null
    private var model: RelevanceModel? = null // touched on the worker thread only
    private var shown: Bitmap? = null  // the photo as displayed (premultiplied, drawable)
    private var photo: Photo? = null  // the photo as the model takes it
    private var artifactKey: String? = null
    private var presetIndex = 0
    private var typed: String? = null  // the typed query in use; null: the chosen preset
    private var encoder: QueryEncoder? = null // touched on the worker thread only

    private lateinit var status: TextView
    private lateinit var weights: TextView
    private lateinit var heatmap: HeatmapView

    private val pickPhoto = registerForActivityResult(ActivityResultContracts.PickVisualMedia()) { uri: Uri? ->
        if (uri != null) loadPhoto { contentResolver.openInputStream(uri) ?: throw IllegalArgumentException("cannot open $uri") }
    }

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        val pad = (12 * resources.displayMetrics.density).toInt()
        val root = LinearLayout(this).apply { orientation = LinearLayout.VERTICAL; setPadding(pad, pad, pad, pad) }
        val buttons = LinearLayout(this).apply { orientation = LinearLayout.HORIZONTAL }
        val sampleButton = Button(this).apply { text = "Sample" }
        val photoButton = Button(this).apply { text = "Photo…" }
        val checkButton = Button(this).apply { text = "Self-check" }
        listOf(sampleButton, photoButton, checkButton).forEach { buttons.addView(it) }
        val queryField = EditText(this).apply { hint = "Type a query…"; setSingleLine(true) }
        val askButton = Button(this).apply { text = "Ask" }
        val typedRow = LinearLayout(this).apply { orientation = LinearLayout.HORIZONTAL }
        typedRow.addView(queryField, LinearLayout.LayoutParams(0, LinearLayout.LayoutParams.WRAP_CONTENT, 1f))
        typedRow.addView(askButton)
        val querySpinner = Spinner(this)
        val modelSpinner = Spinner(this)
        status = TextView(this)
        weights = TextView(this)
        heatmap = HeatmapView(this)
        root.addView(buttons)
        root.addView(label("Query"))
        root.addView(typedRow)
        root.addView(querySpinner)
        root.addView(label("Model"))
        root.addView(modelSpinner)
        root.addView(heatmap, LinearLayout.LayoutParams(LinearLayout.LayoutParams.MATCH_PARENT, 0, 1f))
        root.addView(weights)
        root.addView(status)
        setContentView(root)

        val c = try {
            Contract.load(this)
        } catch (e: Exception) {
            status.text = e.message
            listOf(sampleButton, photoButton, checkButton).forEach { it.isEnabled = false }
            return
        }
        contract = c
        artifactKey = c.app.defaultArtifact

        if (c.presets.items.isEmpty() && !c.typedText.supported) {
            status.text = "No preset queries in contract.json: ${c.presets.note}"
            listOf(sampleButton, photoButton).forEach { it.isEnabled = false }
        }
        querySpinner.adapter = ArrayAdapter(this, android.R.layout.simple_spinner_dropdown_item, c.presets.items.map { it.text })
        querySpinner.onItemSelectedListener = onSelect { presetIndex = it; typed = null; infer() }
        if (c.typedText.supported) {
            askButton.setOnClickListener { typed = queryField.text.toString(); infer() }
        } else {
            // presets only: the build says why (contract.json typed_text.why)
            listOf(queryField, askButton).forEach { it.isEnabled = false }
            queryField.hint = "Presets only: ${c.typedText.why}"
        }
        val keys = c.artifacts.keys.toList()
        modelSpinner.adapter = ArrayAdapter(this, android.R.layout.simple_spinner_dropdown_item,
            keys.map { "$it (${c.artifacts.getValue(it).file}, ${c.artifacts.getValue(it).bytes / 1024} KB)" })
        modelSpinner.setSelection(keys.indexOf(c.app.defaultArtifact))
        modelSpinner.onItemSelectedListener = onSelect { i ->
            if (keys[i] != artifactKey) {
                artifactKey = keys[i]
                worker.execute { model?.close(); model = null }
                infer()
            }
        }

        // the sample photo checked once against contract.json's files, then decoded from those bytes
        val sample = { c.checkedAsset(this, c.app.sampleImage).inputStream() }
        sampleButton.setOnClickListener { loadPhoto(sample) }
        photoButton.setOnClickListener {
            pickPhoto.launch(PickVisualMediaRequest(ActivityResultContracts.PickVisualMedia.ImageOnly))
        }
        checkButton.setOnClickListener { selfCheck(c) }
        loadPhoto(sample)
    }

    override fun onDestroy() {
        worker.execute { model?.close(); model = null; encoder?.close(); encoder = null }
        worker.shutdown()
        super.onDestroy()
    }

    private fun label(text: String) = TextView(this).apply { this.text = text }

    private fun onSelect(action: (Int) -> Unit) = object : AdapterView.OnItemSelectedListener {
        override fun onItemSelected(parent: AdapterView<*>?, view: View?, position: Int, id: Long) = action(position)
        override fun onNothingSelected(parent: AdapterView<*>?) {}
    }

    private fun loadPhoto(open: () -> java.io.InputStream) {
        val c = contract ?: return
        status.text = "Reading photo…"
        worker.execute {
            try {
                val input = Preprocess.decodePhoto(open, c.preprocessing)
                val display = decodeForDisplay(open, Preprocess.exifOrientation(open))
                runOnUiThread { shown = display; photo = input; infer() }
            } catch (e: Exception) {
                runOnUiThread { status.text = "Could not read that image: ${e.message}" }
            }
        }
    }

    /**
     * The picture on screen only (never the model's input, which is Preprocess.decodePhoto): upright,
     * premultiplied so a Canvas can draw it, and subsampled by a power of two to at most
     * DISPLAY_MAX_SIDE px per side (a full 8192 x 8192 bitmap is too large for a Canvas).
     */
    private fun decodeForDisplay(open: () -> java.io.InputStream, exif: Int): Bitmap {
        val bounds = BitmapFactory.Options().apply { inJustDecodeBounds = true }
        open().use { BitmapFactory.decodeStream(it, null, bounds) }
        var sample = 1
        while (maxOf(bounds.outWidth, bounds.outHeight) / sample > DISPLAY_MAX_SIDE) sample *= 2
        val bitmap = open().use {
            BitmapFactory.decodeStream(it, null, BitmapFactory.Options().apply { inSampleSize = sample })
        } ?: throw IllegalArgumentException("not an image")
        val o = Upright.ORIENTATIONS[exif] ?: return bitmap
        // the same mapping as the model's input (Upright.rgb): the flips in the stored frame,
        // then the transpose (x, y) -> (y, x), which is a rotation by 90 degrees and a mirror
        val m = Matrix()
        if (o.flipRows) m.postScale(1f, -1f)
        if (o.flipCols) m.postScale(-1f, 1f)
        if (o.transpose) { m.postRotate(90f); m.postScale(-1f, 1f) }
        return if (m.isIdentity) bitmap else Bitmap.createBitmap(bitmap, 0, 0, bitmap.width, bitmap.height, m, true)
    }

    /** Preprocess the current photo, run the chosen model with the typed or preset query, draw. */
    private fun infer() {
        val c = contract ?: return
        val input = photo ?: return
        val display = shown ?: return
        val key = artifactKey ?: return
        val text = typed
        val preset = c.presets.items.getOrNull(presetIndex)
        if (text == null && preset == null) return
        status.text = "Running $key…"
        worker.execute {
            try {
                val m = model ?: RelevanceModel.open(this, c, key).also { model = it }
                // a typed query: tokenizer -> encoder .pte, timed; a preset: its stored embedding
                val encoded = text?.let { (encoder ?: QueryEncoder.open(this, c).also { e -> encoder = e }).encode(it) }
                val query = encoded?.embedding ?: preset!!.embedding
                val start = System.nanoTime()
                val p = m.predict(input, query)
                val ms = (System.nanoTime() - start) / 1e6
                val timing = if (encoded == null) String.format(Locale.US, "%.1f ms", ms)
                else String.format(Locale.US, "%d tokens, tokenize %.1f + encode %.1f + relevance %.1f = %.1f ms",
                    encoded.ids.size, encoded.tokenizeMs, encoded.encodeMs, ms, encoded.tokenizeMs + encoded.encodeMs + ms)
                runOnUiThread {
                    val strongest = Verdict.strongestCells(p, c.model.numPatches, c.model.strongestShare)
                    heatmap.show(display, input.width, input.height, p, c.model.grid, strongest)
                    weights.text = c.model.weightsOrder.zip(p.weights.toList())
                        .joinToString("   ") { (n, w) -> String.format(Locale.US, "%s %.2f", n, w) }
                    status.text = String.format(Locale.US, "“%s”: %s\n%s (ExecuTorch, %s); red = relevance, " +
                        "yellow = the strongest %d of the top-%d", text ?: preset!!.text, Verdict.text(p, c.calibration),
                        timing, m.entry.file, strongest.size, c.model.topK)
                }
            } catch (e: Exception) {
                runOnUiThread { status.text = "Inference failed: ${e.message}" }
            }
        }
    }

    private fun selfCheck(c: Contract) {
        status.text = "Self-check: running the golden bundle through every model…"
        worker.execute {
            val text = try {
                GoldenCheck.run(this, c).joinToString("\n") { r ->
                    val head = if (r.passed) "PASS" else "FAIL"
                    val topk = r.metrics["topk_overlap_min"] ?: Double.NaN
                    val rel = r.metrics["relevance_max_abs"] ?: Double.NaN
                    String.format(Locale.US, "%s %s: top-K min %.3f, relevance max abs %.2g %s",
                        head, r.file, topk, rel, r.failures.joinToString("; "))
                }
            } catch (e: Exception) {
                "Self-check failed: ${e.message}"
            }
            runOnUiThread { status.text = text }
        }
    }
}

/** The whole photo at its own aspect, a red overlay with alpha = relevance, and the top-K cells
 *  outlined. The grid covers the whole photo: a cell is (photo width / grid) x (photo height / grid). */
class HeatmapView(context: Context) : View(context) {
    private var bitmap: Bitmap? = null
    private var photoWidth = 1
    private var photoHeight = 1
    private var prediction: Prediction? = null
    private var grid = 1
    private var outlined: List<Int> = emptyList()
    private val fill = Paint()
    private val outline = Paint().apply { style = Paint.Style.STROKE; color = Color.YELLOW; strokeWidth = 2f }
    private val photoPaint = Paint(Paint.FILTER_BITMAP_FLAG)

    /** `bitmap` is the on-screen copy; `width` x `height` the photo the model saw (its own size);
     *  `outlined`: the cells the answer rests on (Verdict.strongestCells). */
    fun show(bitmap: Bitmap, width: Int, height: Int, prediction: Prediction, grid: Int, outlined: List<Int>) {
        this.outlined = outlined
        this.bitmap = bitmap
        this.photoWidth = width
        this.photoHeight = height
        this.prediction = prediction
        this.grid = grid
        invalidate()
    }

    override fun onDraw(canvas: Canvas) {
        val b = bitmap ?: return
        val fit = minOf(width.toFloat() / photoWidth, height.toFloat() / photoHeight)
        val w = photoWidth * fit
        val h = photoHeight * fit
        val left = (width - w) / 2
        val top = (height - h) / 2
        canvas.drawBitmap(b, null, RectF(left, top, left + w, top + h), photoPaint)
        val p = prediction ?: return
        val cw = w / grid
        val ch = h / grid
        // relevance[r * grid + c] scores the cell at row r, column c (contract: model.patch_index)
        for (i in p.relevance.indices) {
            val r = i / grid
            val c = i % grid
            fill.color = Color.argb((p.relevance[i].coerceIn(0f, 1f) * 150).toInt(), 255, 0, 0)
            canvas.drawRect(left + c * cw, top + r * ch, left + (c + 1) * cw, top + (r + 1) * ch, fill)
        }
        for (i in outlined) {
            if (i < 0 || i >= grid * grid) continue
            val r = i / grid
            val c = i % grid
            canvas.drawRect(left + c * cw + 1, top + r * ch + 1, left + (c + 1) * cw - 1, top + (r + 1) * ch - 1, outline)
        }
    }
}
