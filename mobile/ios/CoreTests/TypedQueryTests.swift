// Typed queries (TypedText.swift) against what the build wrote: contract.json's typed_text, the
// tokenizer it names, the length rules, and TokenMeanEncoder against targets/ios/encoder.py's
// numbers for the same ids (typed_checks.json, written only for arr-coc-0-1's encoder).
import Foundation
import XCTest
@testable import ArrcocCore

/// typed_checks.json (targets/ios/encoder.py write_swift_checks).
struct TypedChecks: Decodable {
    struct Case: Decodable {
        let ids: [Int]
        let embedding: [Float]
    }

    let tolerance: Double
    let cases: [Case]
}

final class TypedQueryTests: XCTestCase {
    func testAQueryOfOnlyInvisibleCharactersIsRefusedBeforeTheTokenizer() throws {
        for text in ["", "   ", "\u{200B}\u{200B}", "\u{FEFF}", " \u{200D}\u{2060} ", "\u{200E}\t"] {
            XCTAssertThrowsError(try TypedQuery.checkText(text), "taken: \(text.unicodeScalars.map(\.value))") { error in
                XCTAssertEqual(error as? TypedQueryError, .invisible)
            }
        }
        for text in ["a\u{200B}b", "赤いもの", "\u{200B}something red", "\u{1F600}"] {
            XCTAssertNoThrow(try TypedQuery.checkText(text), text)
        }
    }

    func testTypedTextNamesFilesTheBundleHolds() throws {
        let contract = try Fixtures.contract()
        let typed = contract.typed_text
        guard typed.supported else {
            XCTAssertNotNil(typed.why, "typed_text unsupported without a reason")
            XCTAssertThrowsError(try TypedQuery.tokenizer(contract, folder: Fixtures.resources))
            return
        }
        let tokenizer = try XCTUnwrap(typed.tokenizer), encoder = try XCTUnwrap(typed.encoder)
        let url = try contract.resourceURL(tokenizer.file, folder: Fixtures.resources)
        XCTAssertEqual(try Data(contentsOf: url).count, tokenizer.bytes)
        XCTAssertEqual(tokenizer.add_special_tokens, encoder.kind == "minilm")
        XCTAssertEqual(encoder.output.shape.last?.size, contract.model.query_dim)
        let tok = try TypedQuery.tokenizer(contract, folder: Fixtures.resources)
        XCTAssertEqual(tok.kind, encoder.kind == "minilm" ? "wordpiece" : "bpe-bytelevel")
        // the encoder itself: a file TokenMeanEncoder reads, or a package (a folder) only CoreML loads
        if encoder.kind == "qwen-token-mean" {
            let table = try TokenMeanEncoder(data: Data(contentsOf: contract.resourceURL(encoder.file, folder: Fixtures.resources)))
            XCTAssertEqual(table.width, contract.model.query_dim)
        }
    }

    func testLengthRulesOfTheShippedEncoder() throws {
        let contract = try Fixtures.contract()
        guard let encoder = contract.typed_text.encoder else { return }
        XCTAssertThrowsError(try TypedQuery.encoderIds(encoder, Array(repeating: 1, count: encoder.min_length - 1))) {
            XCTAssertEqual($0 as? TypedQueryError, .empty)
        }
        XCTAssertEqual(try TypedQuery.encoderIds(encoder, Array(repeating: 1, count: encoder.min_length)).count, encoder.min_length)
        if let max = encoder.max_length {
            XCTAssertThrowsError(try TypedQuery.encoderIds(encoder, Array(repeating: 1, count: max + 1))) {
                XCTAssertEqual($0 as? TypedQueryError, .tooLong(tokens: max + 1, max: max))
            }
        }
        // the tokenizer the contract names never gives the encoder fewer ids than it takes for real text,
        // and an empty query is refused before the encoder
        let tokenizer = try TypedQuery.tokenizer(contract, folder: Fixtures.resources)
        XCTAssertNoThrow(try TypedQuery.encoderIds(encoder, tokenizer.encode("where is the cat?")))
        if encoder.kind == "qwen-token-mean" {
            XCTAssertThrowsError(try TypedQuery.encoderIds(encoder, tokenizer.encode("")))
        }
    }

    func testHalfToDoubleIsExact() {
        XCTAssertEqual(TokenMeanEncoder.half(0x3c00), 1.0)
        XCTAssertEqual(TokenMeanEncoder.half(0xc000), -2.0)
        XCTAssertEqual(TokenMeanEncoder.half(0x7bff), 65504.0)
        XCTAssertEqual(TokenMeanEncoder.half(0x0001), 0x1p-24)
        XCTAssertEqual(TokenMeanEncoder.half(0x3555), 0.333251953125)
        XCTAssertEqual(TokenMeanEncoder.half(0xfc00), -.infinity)
        XCTAssertTrue(TokenMeanEncoder.half(0x7e00).isNaN)
    }

    /// TokenMeanEncoder on the build's ids gives the build's embeddings (table_query, NumPy float64);
    /// its own numbers go to the report for the build to compare once more.
    func testTokenMeanEncoderGivesPythonsEmbeddings() throws {
        let contract = try Fixtures.contract()
        guard let encoder = contract.typed_text.encoder, encoder.kind == "qwen-token-mean" else { return }
        let checks = try JSONDecoder().decode(TypedChecks.self, from: Data(contentsOf: Fixtures.resources.appendingPathComponent("typed_checks.json")))
        let table = try TokenMeanEncoder(data: Data(contentsOf: contract.resourceURL(encoder.file, folder: Fixtures.resources)))
        XCTAssertFalse(checks.cases.isEmpty)
        var got: [[Float]] = []
        for (i, c) in checks.cases.enumerated() {
            let q = try table.encode(c.ids)
            got.append(q)
            XCTAssertEqual(q.count, c.embedding.count, "case \(i)")
            let scale = Double(c.embedding.map { abs($0) }.max() ?? 1)
            let diff = zip(q, c.embedding).map { abs(Double($0) - Double($1)) }.max() ?? 0
            XCTAssertLessThanOrEqual(diff, checks.tolerance * scale, "case \(i): ids \(c.ids)")
        }
        XCTAssertThrowsError(try table.encode([]))
        XCTAssertThrowsError(try table.encode([table.rows]))
        try Fixtures.report("typed_text", got)
    }
}
