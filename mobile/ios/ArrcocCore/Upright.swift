// The photo upright, as PIL's ImageOps.exif_transpose gives it (arrcoc_edge.stages.golden.load_photo): a pure
// re-indexing of the decoded pixels by EXIF orientation, no pixel blended. A function of bytes, so
// it is tested on Linux against PIL for all eight orientations (tests/test_ios.py runs CoreTests);
// RelevanceModel.uprightRGB (UIKit/CoreGraphics) decodes into RGBA8 and calls it.
enum Upright {
    /// EXIF orientation -> how the upright photo reads the stored pixels: upright pixel (r, c) reads
    /// stored pixel (a, b) with a = transpose ? c : r, b = transpose ? r : c, then a = storedHeight - 1 - a
    /// if flipRows and b = storedWidth - 1 - b if flipCols. The same table as the Android app.
    static let orientations: [Int: (transpose: Bool, flipRows: Bool, flipCols: Bool)] = [
        1: (false, false, false),
        2: (false, false, true),
        3: (false, true, true),
        4: (false, true, false),
        5: (true, false, false),
        6: (true, true, false),
        7: (true, true, true),
        8: (true, false, true),
    ]

    /// Stored RGBA8 rows (`bytesPerRow` apart; premultiplied, as CoreGraphics draws) -> the upright
    /// photo's RGB bytes [H*W*3], alpha dropped: (bytes, H, W). An unknown orientation is left as
    /// stored, as exif_transpose does. Un-premultiplying is exact for opaque pixels (every camera
    /// photo) and within rounding for translucent ones; a fully transparent pixel stays black.
    static func rgb(fromRGBA rgba: [UInt8], height sh: Int, width sw: Int, bytesPerRow: Int,
                    orientation: Int) -> ([UInt8], Int, Int) {
        let o = orientations[orientation] ?? (false, false, false)
        let height = o.transpose ? sw : sh, width = o.transpose ? sh : sw
        var rgb = [UInt8](repeating: 0, count: height * width * 3)
        var out = 0
        for r in 0..<height {
            for c in 0..<width {
                var a = o.transpose ? c : r
                var b = o.transpose ? r : c
                if o.flipRows { a = sh - 1 - a }
                if o.flipCols { b = sw - 1 - b }
                let s = a * bytesPerRow + b * 4
                let alpha = Int(rgba[s + 3])
                for k in 0..<3 {  // R, G, B; the alpha byte (s + 3) is dropped
                    let v = Int(rgba[s + k])
                    rgb[out + k] = UInt8(alpha == 255 || alpha == 0 ? v : min(255, (v * 255 + alpha / 2) / alpha))
                }
                out += 3
            }
        }
        return (rgb, height, width)
    }
}
