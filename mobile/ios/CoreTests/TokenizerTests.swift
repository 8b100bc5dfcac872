// Tokenizer.swift against Python's `tokenizers` on the build's corpus and seeded random lines, for
// each tokenizer.json the project ships (targets/shared/tokenizer_cases.py writes the queries and Python's
// ids; targets/ios/app.py passes the folder as ARRCOC_IOS_TOKENIZER_CASES), and the refusal of a
// tokenizer.json of another kind.
import Foundation
import XCTest
@testable import ArrcocCore

final class TokenizerTests: XCTestCase {
    private struct Case: Decodable { let name: String, tokenizer: String, kind: String, max_length: Int?, ids: [[Int]] }
    private struct Cases: Decodable { let texts: [String], cases: [Case], missing: [String] }

    func testIdsEqualPythonsOnTheCorpus() throws {
        guard let path = Fixtures.env["ARRCOC_IOS_TOKENIZER_CASES"] else {
            throw XCTSkip("no ARRCOC_IOS_TOKENIZER_CASES: Python's ids come from `invoke build --target ios`")
        }
        let folder = URL(fileURLWithPath: path)
        let data = try JSONDecoder().decode(Cases.self, from: Data(contentsOf: folder.appendingPathComponent("cases.json")))
        // both shipped tokenizers are checked, or the build says why one is missing
        XCTAssertEqual(data.cases.count + data.missing.count, 2, "\(data.missing)")
        for c in data.cases {
            let tokenizer = try Tokenizer(json: Data(contentsOf: folder.appendingPathComponent(c.tokenizer)), maxLength: c.max_length)
            XCTAssertEqual(tokenizer.kind, c.kind)
            XCTAssertEqual(tokenizer.maxLength, c.max_length)
            for (i, text) in data.texts.enumerated() where tokenizer.encode(text) != c.ids[i] {
                XCTFail("\(c.name) line \(i + 1) \(text.debugDescription.prefix(80)): Python \(c.ids[i].prefix(12)), Swift \(tokenizer.encode(text).prefix(12))")
                break
            }
        }
    }

    func testATokenizerOfAnotherKindIsRefusedWithOneLine() {
        let others = [#"{"model": {"type": "Unigram", "vocab": []}}"#, "[1, 2]", "not json",
                      #"{"model": {"type": "WordPiece", "vocab": {}}, "normalizer": {"type": "NFKC"}}"#]
        for json in others {
            XCTAssertThrowsError(try Tokenizer(json: Data(json.utf8)), json) { error in
                let message = "\(error)"
                XCTAssertFalse(message.contains("\n"), message)
                XCTAssertTrue(message.hasPrefix("tokenizer.json"), message)
            }
        }
    }
}
