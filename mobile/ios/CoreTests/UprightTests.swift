// The EXIF re-index (Upright.rgb) on a small non-square photo, all eight orientations, against the
// upright photos PIL's ImageOps.exif_transpose made on the build host (core_checks).
import XCTest
@testable import ArrcocCore

final class UprightTests: XCTestCase {
    func testEveryOrientationIsPilsExifTranspose() throws {
        let contract = try Fixtures.contract()
        let (checks, bin) = try Fixtures.checks(contract)
        let arrays = GoldenBundle(index: GoldenIndex(samples: [GoldenSample(name: "exif", arrays: checks.exif_arrays)]), data: bin)
        let (stored, sh, sw) = try arrays.photo(0, "stored")
        XCTAssertNotEqual(sh, sw, "the test photo must be non-square")
        // as CoreGraphics leaves it: opaque RGBA8 rows, padded past the last pixel
        let bytesPerRow = sw * 4 + 12
        var rgba = [UInt8](repeating: 0, count: bytesPerRow * sh)
        for y in 0..<sh {
            for x in 0..<sw {
                for k in 0..<3 { rgba[y * bytesPerRow + x * 4 + k] = stored[(y * sw + x) * 3 + k] }
                rgba[y * bytesPerRow + x * 4 + 3] = 255
            }
        }
        XCTAssertEqual(Set(checks.exif.map(\.orientation)), Set(1...8))
        var out: [String: [Int]] = [:]
        for c in checks.exif {
            let (want, h, w) = try arrays.photo(0, c.upright)
            let (got, gh, gw) = Upright.rgb(fromRGBA: rgba, height: sh, width: sw, bytesPerRow: bytesPerRow, orientation: c.orientation)
            XCTAssertEqual([gh, gw], [h, w], "orientation \(c.orientation)")
            XCTAssertTrue(got == want, "orientation \(c.orientation) differs from PIL's exif_transpose")
            out["\(c.orientation)"] = [gh, gw] + got.map { Int($0) }
        }
        try Fixtures.report("upright", out)
    }

    func testTranslucentPixelsAreUnpremultiplied() {
        // one pixel, premultiplied (R, G, B) = (64, 128, 0) at alpha 128 -> stored colour (128, 255, 0)
        let (rgb, h, w) = Upright.rgb(fromRGBA: [64, 128, 0, 128], height: 1, width: 1, bytesPerRow: 4, orientation: 1)
        XCTAssertEqual([h, w], [1, 1])
        XCTAssertEqual(rgb, [128, 255, 0])
    }
}
