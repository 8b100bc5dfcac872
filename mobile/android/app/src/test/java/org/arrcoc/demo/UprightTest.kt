// Upright.rgb (the EXIF re-indexing both the model's input and nothing else goes through) against
// PIL's ImageOps.exif_transpose, which arrcoc_edge.stages.golden.load_photo applies: for all eight EXIF
// orientations, on a small non-square RGBA image whose rows are padded (a Bitmap's rowBytes may
// exceed width * 4). targets/android/app.py writes the stored bytes and PIL's upright RGB bytes.
package org.arrcoc.demo

import org.junit.Assert.assertArrayEquals
import org.junit.Assert.assertEquals
import org.junit.Test
import java.io.File
import java.nio.ByteBuffer

class UprightTest {
    @Test
    fun everyOrientationEqualsPilExifTranspose() {
        val dir = Fixtures.fixtures("exif")
        val spec = Fixtures.json(File(dir, "cases.json"))
        val (h, w, stride) = listOf("height", "width", "stride").map { spec.getInt(it) }
        val stored = ByteBuffer.wrap(File(dir, spec.getString("stored")).readBytes())
        val orientations = spec.getJSONObject("upright")
        assertEquals((1..8).map { "$it" }.toSet(), orientations.keys().asSequence().toSet())
        for (key in orientations.keys()) {
            val pil = orientations.getJSONObject(key)
            val photo = Upright.rgb(stored, h, w, stride, key.toInt())
            assertEquals("orientation $key: height", pil.getInt("height"), photo.height)
            assertEquals("orientation $key: width", pil.getInt("width"), photo.width)
            val bytes = ByteArray(photo.rgb.capacity()).also { photo.rgb.duplicate().apply { rewind() }.get(it) }
            assertArrayEquals("orientation $key: bytes", File(dir, pil.getString("file")).readBytes(), bytes)
        }
    }

    @Test
    fun anUnknownOrientationLeavesThePhotoAsStored() {
        val rgba = ByteBuffer.wrap(ByteArray(2 * 3 * 4) { it.toByte() })
        val photo = Upright.rgb(rgba, 2, 3, 12, 0)
        assertEquals(2, photo.height)
        assertEquals(3, photo.width)
        assertEquals(4.toByte(), photo.rgb.get(3)) // pixel (0, 1) starts at stored byte 4
    }
}
