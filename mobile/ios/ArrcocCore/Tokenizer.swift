// The tokenizer of a typed query, read from the build's own tokenizer.json (the file the page and
// Python use) and doing what it says for the two kinds the project ships: BERT WordPiece
// (all-MiniLM-L6-v2) and byte-level BPE (Qwen3, for arr-coc-0-1 checkpoints). The same algorithm as
// the Android app's Tokenizer.kt, held to Python's `tokenizers` id for id: `invoke app-tokenize
// --app ios` runs this code (mobile/README.md) and CoreTests/TokenizerTests compares it with the
// reference's ids on the build's corpus. A tokenizer.json of any other kind is refused with one line.
// Foundation only. Vocabulary keys are UTF-8 bytes, never Swift Strings: String equality is
// canonical equivalence, so "한" would find the vocabulary's "한" (NFD jamo) where the crate does not.
// The Unicode classes are the crate's own (UnicodeTables.swift); NFC/NFD (Foundation) and lowercase
// (Unicode.Scalar.Properties) are the platform's: mobile/README.md says where those differ.
import Foundation

public struct TokenizerError: Error, CustomStringConvertible {
    public let description: String
}

public struct Tokenizer {
    /// "wordpiece" or "bpe-bytelevel".
    public let kind: String
    /// The most ids `encode` returns (special tokens included); nil: no limit.
    public let maxLength: Int?
    private let added: [([UInt32], Int)]
    private let model: Model
    private let prefix: [Int]
    private let suffix: [Int]

    private enum Model {
        case wordPiece(BertNormalizer, WordPiece)
        case bpe(nfc: Bool, Bpe)
    }

    /// A tokenizer.json's bytes. `maxLength`: the encoder's maximum length (contract.json's; 256 for
    /// all-MiniLM-L6-v2, sentence-transformers' max_seq_length), nil for none. The file's own
    /// `truncation` and `padding` are not applied: transformers overrides both with its call's
    /// arguments, which is how the Python encoder runs it.
    public init(json: Data, maxLength: Int? = nil) throws {
        guard let root = (try? JSONSerialization.jsonObject(with: json)) as? [String: Any] else {
            throw TokenizerError(description: "tokenizer.json is not a JSON object")
        }
        guard let model = root["model"] as? [String: Any] else { throw Self.refuse("it has no \"model\" object") }
        if let m = maxLength, m < 0 { throw TokenizerError(description: "maxLength must be >= 0, got \(m)") }
        self.maxLength = maxLength
        self.added = try Self.addedTokens(root)
        (prefix, suffix) = try Self.template(root["post_processor"] as? [String: Any])
        switch model["type"] as? String {
        case "WordPiece":
            kind = "wordpiece"
            self.model = try Self.wordPiece(root, model)
        case "BPE":
            kind = "bpe-bytelevel"
            self.model = try Self.byteLevelBpe(root, model)
        case let other:
            throw Self.refuse("its model is \(other ?? "untyped")")
        }
    }

    /// The ids the app's encoder gets for `text`: added tokens matched in the raw text, the rest
    /// normalized, pre-tokenized and run through the model, then the template's special tokens,
    /// the content cut first so that the whole fits `maxLength` (as transformers cuts one text).
    public func encode(_ text: String) -> [Int] {
        var content: [Int] = []
        for (segment, id) in splitAddedTokens(text.unicodeScalars.map { $0.value }) {
            if let id { content.append(id) } else { content += encodeSegment(segment) }
        }
        let room = maxLength.map { Swift.max(0, $0 - prefix.count - suffix.count) } ?? content.count
        return prefix + Array(content.prefix(room)) + suffix
    }

    private func encodeSegment(_ scalars: [UInt32]) -> [Int] {
        switch model {
        case let .wordPiece(normalizer, wordPiece):
            return bertWords(normalizer.normalize(scalars)).flatMap { wordPiece.word($0) }
        case let .bpe(nfc, bpe):
            let text = nfc ? normalized(string(scalars), \.precomposedStringWithCanonicalMapping) : string(scalars)
            return QwenSplit.pieces(text.unicodeScalars.map { $0.value }).flatMap { bpe.word(utf8($0)) }
        }
    }

    /// (text, nil) and (token, id) pieces: the added tokens' leftmost-longest matches, as the crate's
    /// AddedVocabulary finds them (all of ours are matched on the raw, unnormalized text).
    private func splitAddedTokens(_ s: [UInt32]) -> [([UInt32], Int?)] {
        if added.isEmpty { return [(s, nil)] }
        var out: [([UInt32], Int?)] = []
        var start = 0, i = 0
        while i < s.count {
            var best: ([UInt32], Int)?
            for (token, id) in added where token.count > (best?.0.count ?? 0) && i + token.count <= s.count
                && s[i] == token[0] && Array(s[i..<i + token.count]) == token {
                best = (token, id)
            }
            guard let (token, id) = best else { i += 1; continue }
            if i > start { out.append((Array(s[start..<i]), nil)) }
            out.append((token, id))
            i += token.count
            start = i
        }
        if start < s.count { out.append((Array(s[start...]), nil)) }
        return out
    }

    // ---- reading tokenizer.json ----

    static func refuse(_ what: String) -> TokenizerError {
        TokenizerError(description: "tokenizer.json: \(what); this app reads BERT WordPiece (all-MiniLM-L6-v2) and Qwen3's byte-level BPE only")
    }

    private static func addedTokens(_ root: [String: Any]) throws -> [([UInt32], Int)] {
        var out: [([UInt32], Int)] = []
        for case let t as [String: Any] in root["added_tokens"] as? [Any] ?? [] {
            guard let content = t["content"] as? String, let id = t["id"] as? Int else { throw refuse("an added token has no content or id") }
            for flag in ["normalized", "lstrip", "rstrip", "single_word"] where t[flag] as? Bool == true {
                throw refuse("added token \"\(content)\" is normalized, stripped or single-word")
            }
            if !content.isEmpty { out.append((content.unicodeScalars.map { $0.value }, id)) }
        }
        return out
    }

    /// The vocabulary keyed by UTF-8 bytes.
    private static func vocab(_ model: [String: Any]) throws -> [[UInt8]: Int] {
        guard let v = model["vocab"] as? [String: Any] else { throw refuse("its model has no vocab object") }
        var out: [[UInt8]: Int] = [:]
        out.reserveCapacity(v.count)
        for (key, value) in v {
            guard let id = value as? Int else { throw refuse("vocab entry \"\(key)\" is not an id") }
            out[Array(key.utf8)] = id
        }
        return out
    }

    /// TemplateProcessing's `single`: the special tokens' ids before and after sequence A.
    private static func template(_ post: [String: Any]?) throws -> ([Int], [Int]) {
        switch post?["type"] as? String {
        case nil, "ByteLevel": return ([], [])  // ByteLevel: offsets only, no ids of its own
        case "TemplateProcessing": break
        case let other: throw refuse("its post-processor is \(other ?? "untyped")")
        }
        guard let single = post?["single"] as? [[String: Any]], let specials = post?["special_tokens"] as? [String: Any] else {
            throw refuse("its TemplateProcessing has no single template")
        }
        var before: [Int] = [], after: [Int] = [], seenA = false
        for item in single {
            if item["Sequence"] != nil { seenA = true; continue }
            guard let name = (item["SpecialToken"] as? [String: Any])?["id"] as? String,
                  let ids = (specials[name] as? [String: Any])?["ids"] as? [Int] else { throw refuse("its template names an unknown special token") }
            if seenA { after += ids } else { before += ids }
        }
        return (before, after)
    }

    private static func wordPiece(_ root: [String: Any], _ model: [String: Any]) throws -> Model {
        guard let norm = root["normalizer"] as? [String: Any], norm["type"] as? String == "BertNormalizer" else {
            throw refuse("WordPiece without a BertNormalizer")
        }
        guard (root["pre_tokenizer"] as? [String: Any])?["type"] as? String == "BertPreTokenizer" else {
            throw refuse("WordPiece without a BertPreTokenizer")
        }
        let lowercase = norm["lowercase"] as? Bool ?? true
        let bert = BertNormalizer(cleanText: norm["clean_text"] as? Bool ?? true,
                                  chineseChars: norm["handle_chinese_chars"] as? Bool ?? true,
                                  stripAccents: norm["strip_accents"] as? Bool ?? lowercase, lowercase: lowercase)
        let vocab = try vocab(model)
        guard let unkName = model["unk_token"] as? String, let unk = vocab[Array(unkName.utf8)] else {
            throw refuse("its unk_token is not in the vocabulary")
        }
        let wp = WordPiece(vocab: vocab, unk: unk, prefix: Array((model["continuing_subword_prefix"] as? String ?? "##").utf8),
                           maxChars: model["max_input_chars_per_word"] as? Int ?? 100)
        return .wordPiece(bert, wp)
    }

    /// The Split pattern QwenSplit implements by hand: the crate runs it with Oniguruma, whose ordered
    /// alternation and look-ahead NSRegularExpression (ICU) does not promise to share.
    static let qwenPattern = #"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"#

    private static func byteLevelBpe(_ root: [String: Any], _ model: [String: Any]) throws -> Model {
        let norm = root["normalizer"] as? [String: Any]
        if let norm, norm["type"] as? String != "NFC" { throw refuse("BPE with a \(norm["type"] ?? "untyped") normalizer") }
        let pre = root["pre_tokenizer"] as? [String: Any]
        guard pre?["type"] as? String == "Sequence", let steps = pre?["pretokenizers"] as? [[String: Any]], steps.count == 2 else {
            throw refuse("BPE without Qwen3's Split + ByteLevel pre-tokenizer")
        }
        let split = steps[0], byteLevel = steps[1]
        guard split["type"] as? String == "Split", (split["pattern"] as? [String: Any])?["Regex"] as? String == qwenPattern,
              split["behavior"] as? String == "Isolated", split["invert"] as? Bool != true else {
            throw refuse("its Split pre-tokenizer is not Qwen3's")
        }
        guard byteLevel["type"] as? String == "ByteLevel", byteLevel["add_prefix_space"] as? Bool != true,
              byteLevel["use_regex"] as? Bool == false else {
            throw refuse("its ByteLevel pre-tokenizer adds a prefix space or its own regex")
        }
        let plain = !(model["dropout"] is NSNumber) && (model["continuing_subword_prefix"] as? String ?? "").isEmpty
            && (model["end_of_word_suffix"] as? String ?? "").isEmpty && model["byte_fallback"] as? Bool != true
            && model["ignore_merges"] as? Bool != true
        guard plain else { throw refuse("its BPE uses dropout, affixes, byte fallback or ignore_merges") }
        guard let merges = model["merges"] as? [Any] else { throw refuse("its BPE has no merges") }
        return .bpe(nfc: norm != nil, try Bpe(vocab: try vocab(model), merges: merges))
    }
}

private func string(_ scalars: [UInt32]) -> String {
    var s = String.UnicodeScalarView()
    s.append(contentsOf: scalars.compactMap(Unicode.Scalar.init))
    return String(s)
}

private func utf8(_ scalars: [UInt32]) -> [UInt8] { Array(string(scalars).utf8) }

/// Foundation's NFC or NFD of `text`, checked: swift-corelibs-foundation (Linux) composes a code point
/// past U+FFFF by its low 16 bits (U+E0067 + U+0301 became U+01F5 "ǵ"), so a result that is not
/// canonically equivalent to the input (Swift's String == is canonical equivalence, by the standard
/// library's own tables) is redone with every such starter left as it is and the text between
/// normalized alone (composition with one of them, as in Kaithi, is then not made: mobile/README.md).
func normalized(_ text: String, _ form: (String) -> String) -> String {
    let out = form(text)
    if out == text { return out }
    var result = "", run = String.UnicodeScalarView()
    for scalar in text.unicodeScalars {
        if scalar.value > 0xFFFF && scalar.properties.canonicalCombiningClass == .notReordered {
            result += form(String(run)) + String(Character(scalar))
            run = String.UnicodeScalarView()
        } else {
            run.append(scalar)
        }
    }
    return result + form(String(run))
}

/// Unicode classes as the Rust crate decides them: White_Space by its (stable) list, the rest from
/// UnicodeTables.swift, generated from the crate, so a device's Unicode version changes nothing.
enum UnicodeClass {
    static func isWhitespace(_ c: UInt32) -> Bool {
        (0x09...0x0D).contains(c) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (0x2000...0x200A).contains(c)
            || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000
    }
    static func isOther(_ c: UInt32) -> Bool { inRanges(UnicodeTables.other, c) }
    static func isPunctuation(_ c: UInt32) -> Bool { inRanges(UnicodeTables.punctuation, c) }
    static func isNonspacingMark(_ c: UInt32) -> Bool { inRanges(UnicodeTables.nonspacingMark, c) }
    static func isLetter(_ c: UInt32) -> Bool { inRanges(UnicodeTables.letter, c) }
    static func isNumber(_ c: UInt32) -> Bool { inRanges(UnicodeTables.number, c) }

    /// Binary search in [start0, end0, start1, end1, ...] (sorted, inclusive).
    private static func inRanges(_ table: [UInt32], _ c: UInt32) -> Bool {
        var lo = 0, hi = table.count / 2 - 1
        while lo <= hi {
            let mid = (lo + hi) / 2
            if c < table[2 * mid] { hi = mid - 1 } else if c > table[2 * mid + 1] { lo = mid + 1 } else { return true }
        }
        return false
    }
}

/// tokenizers' BertNormalizer: clean text, space out CJK ideographs, strip accents, lowercase.
struct BertNormalizer {
    let cleanText: Bool, chineseChars: Bool, stripAccents: Bool, lowercase: Bool

    func normalize(_ input: [UInt32]) -> [UInt32] {
        var s = input
        if cleanText {
            s = s.compactMap { c in
                if c == 0 || c == 0xFFFD || (c != 0x09 && c != 0x0A && c != 0x0D && UnicodeClass.isOther(c)) { return nil }
                return UnicodeClass.isWhitespace(c) ? 0x20 : c
            }
        }
        if chineseChars { s = s.flatMap { Self.isChineseChar($0) ? [0x20, $0, 0x20] : [$0] } }
        if stripAccents {
            s = normalized(string(s), \.decomposedStringWithCanonicalMapping).unicodeScalars.map { $0.value }
                .filter { !UnicodeClass.isNonspacingMark($0) }
        }
        if lowercase {
            // per code point, full mapping (U+0130 -> "i\u{307}"), no context: as Rust's char::to_lowercase
            s = s.flatMap { c -> [UInt32] in
                if c < 0x80 { return [(0x41...0x5A).contains(c) ? c + 0x20 : c] }
                guard let scalar = Unicode.Scalar(c) else { return [c] }
                return scalar.properties.lowercaseMapping.unicodeScalars.map { $0.value }
            }
        }
        return s
    }

    /// bert.rs is_chinese_char, with the crate's ranges (its extension E starts at U+2B920).
    static func isChineseChar(_ c: UInt32) -> Bool {
        (0x4E00...0x9FFF).contains(c) || (0x3400...0x4DBF).contains(c) || (0x20000...0x2A6DF).contains(c)
            || (0x2A700...0x2B73F).contains(c) || (0x2B740...0x2B81F).contains(c) || (0x2B920...0x2CEAF).contains(c)
            || (0xF900...0xFAFF).contains(c) || (0x2F800...0x2FA1F).contains(c)
    }
}

/// BertPreTokenizer: words split on whitespace (dropped) and punctuation (kept, one per word).
func bertWords(_ text: [UInt32]) -> [[UInt32]] {
    var words: [[UInt32]] = [], word: [UInt32] = []
    for c in text {
        if UnicodeClass.isWhitespace(c) {
            if !word.isEmpty { words.append(word); word = [] }
        } else if UnicodeClass.isPunctuation(c) {
            if !word.isEmpty { words.append(word); word = [] }
            words.append([c])
        } else {
            word.append(c)
        }
    }
    if !word.isEmpty { words.append(word) }
    return words
}

/// WordPiece: greedy longest-match-first; a word it cannot cover, or longer than
/// max_input_chars_per_word code points, is the unknown token.
struct WordPiece {
    let vocab: [[UInt8]: Int], unk: Int, prefix: [UInt8], maxChars: Int

    func word(_ word: [UInt32]) -> [Int] {
        if word.count > maxChars { return [unk] }
        var ids: [Int] = [], start = 0
        while start < word.count {
            var end = word.count
            var found: Int?
            while end > start {
                let piece = utf8(Array(word[start..<end]))
                found = vocab[start > 0 ? prefix + piece : piece]
                if found != nil { break }
                end -= 1
            }
            guard let id = found else { return [unk] }
            ids.append(id)
            start = end
        }
        return ids
    }
}

/// BPE on GPT-2's byte-level alphabet with merges by rank: the lowest-ranked adjacent pair merges
/// first, leftmost on a tie (the order of the crate's priority queue).
struct Bpe {
    /// byte -> the id of its byte-level character (printable bytes stand for themselves, the rest
    /// from U+0100 on).
    private let byteIds: [Int]
    /// (left id << 32 | right id) -> rank << 32 | merged id.
    private let merges: [Int: Int]

    init(vocab: [[UInt8]: Int], merges list: [Any]) throws {
        var next: UInt32 = 256
        var ids: [Int] = []
        for b in 0..<256 {
            let printable = (0x21...0x7E).contains(b) || (0xA1...0xAC).contains(b) || (0xAE...0xFF).contains(b)
            let scalar = Unicode.Scalar(printable ? UInt32(b) : next)!
            if !printable { next += 1 }
            guard let id = vocab[Array(String(Character(scalar)).utf8)] else { throw Tokenizer.refuse("byte \(b) has no token") }
            ids.append(id)
        }
        byteIds = ids
        var merges: [Int: Int] = [:]
        merges.reserveCapacity(list.count)
        for (rank, m) in list.enumerated() {
            let pair: [String]
            if let p = m as? [String], p.count == 2 { pair = p } else if let s = m as? String, let space = s.firstIndex(of: " ") {
                pair = [String(s[..<space]), String(s[s.index(after: space)...])]
            } else { throw Tokenizer.refuse("merge \(rank) is neither a pair nor \"a b\"") }
            let a = Array(pair[0].utf8), b = Array(pair[1].utf8)
            guard let ia = vocab[a], let ib = vocab[b], let merged = vocab[a + b] else {
                throw Tokenizer.refuse("merge \"\(pair[0]) \(pair[1])\" (rank \(rank)) names a token the vocabulary lacks")
            }
            if merges[ia << 32 | ib] == nil { merges[ia << 32 | ib] = rank << 32 | merged }
        }
        self.merges = merges
    }

    func word(_ bytes: [UInt8]) -> [Int] {
        let n = bytes.count
        var id = bytes.map { byteIds[Int($0)] }
        var next = (0..<n).map { $0 + 1 < n ? $0 + 1 : -1 }
        var prev = (0..<n).map { $0 - 1 }
        var alive = [Bool](repeating: true, count: n)
        var queue = Heap()
        func push(_ pos: Int) {
            let r = next[pos]
            guard r >= 0, let m = merges[id[pos] << 32 | id[r]] else { return }
            queue.push(Heap.Entry(rank: m >> 32, pos: pos, merged: m & 0xFFFF_FFFF))
        }
        for i in 0..<n { push(i) }
        while let top = queue.pop() {
            let pos = top.pos, r = next[pos]
            guard alive[pos], r >= 0, let m = merges[id[pos] << 32 | id[r]], m & 0xFFFF_FFFF == top.merged else { continue }  // stale
            id[pos] = top.merged
            alive[r] = false
            next[pos] = next[r]
            if next[r] >= 0 { prev[next[r]] = pos }
            if prev[pos] >= 0 { push(prev[pos]) }
            push(pos)
        }
        var out: [Int] = [], i = n > 0 ? 0 : -1
        while i >= 0 { out.append(id[i]); i = next[i] }
        return out
    }
}

/// A binary min-heap ordered by (rank, position).
struct Heap {
    struct Entry { let rank: Int, pos: Int, merged: Int }
    private var items: [Entry] = []

    private func less(_ a: Entry, _ b: Entry) -> Bool { a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos }

    mutating func push(_ e: Entry) {
        items.append(e)
        var i = items.count - 1
        while i > 0, less(items[i], items[(i - 1) / 2]) { items.swapAt(i, (i - 1) / 2); i = (i - 1) / 2 }
    }

    mutating func pop() -> Entry? {
        guard let top = items.first else { return nil }
        let last = items.removeLast()
        if !items.isEmpty {
            items[0] = last
            var i = 0
            while true {
                let l = 2 * i + 1, r = l + 1
                var m = i
                if l < items.count, less(items[l], items[m]) { m = l }
                if r < items.count, less(items[r], items[m]) { m = r }
                if m == i { break }
                items.swapAt(i, m)
                i = m
            }
        }
        return top
    }
}

/// Qwen3's Split regex (Tokenizer.qwenPattern) with Oniguruma's semantics, by hand: at each position
/// the first alternative that matches wins, quantifiers greedy with backtracking. Every code point is
/// covered by some alternative, so the pieces are exactly the matches.
enum QwenSplit {
    static func pieces(_ s: [UInt32]) -> [[UInt32]] {
        var out: [[UInt32]] = [], i = 0
        while i < s.count {
            let len = matchAt(s, i)
            out.append(Array(s[i..<i + len]))
            i += len
        }
        return out
    }

    private static func isNewline(_ c: UInt32) -> Bool { c == 0x0A || c == 0x0D }
    private static func isOther(_ c: UInt32) -> Bool {
        !UnicodeClass.isWhitespace(c) && !UnicodeClass.isLetter(c) && !UnicodeClass.isNumber(c)
    }

    private static func run(_ s: [UInt32], _ from: Int, _ test: (UInt32) -> Bool) -> Int {
        var k = from
        while k < s.count, test(s[k]) { k += 1 }
        return k - from
    }

    /// The length (in code points, >= 1) of the match at `i`.
    private static func matchAt(_ s: [UInt32], _ i: Int) -> Int {
        if let n = contraction(s, i) { return n }
        let c = s[i]
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !isNewline(c), !UnicodeClass.isLetter(c), !UnicodeClass.isNumber(c), i + 1 < s.count, UnicodeClass.isLetter(s[i + 1]) {
            return 1 + run(s, i + 1, UnicodeClass.isLetter)
        }
        if UnicodeClass.isLetter(c) { return run(s, i, UnicodeClass.isLetter) }
        // \p{N}
        if UnicodeClass.isNumber(c) { return 1 }
        // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
        let start = c == 0x20 && i + 1 < s.count && isOther(s[i + 1]) ? i + 1 : i
        if isOther(s[start]) {
            let end = start + run(s, start, isOther)
            return end - i + run(s, end, isNewline)
        }
        // whitespace from here on: \s*[\r\n]+ (up to the run's last newline), \s+(?!\S), \s+
        let ws = run(s, i, UnicodeClass.isWhitespace)
        if let last = (i..<i + ws).last(where: { isNewline(s[$0]) }) { return last + 1 - i }
        if i + ws == s.count || ws == 1 { return ws }
        return ws - 1
    }

    /// (?i:'s|'t|'re|'ve|'m|'ll|'d), with Unicode case folding ('ſ' folds to 's').
    private static func contraction(_ s: [UInt32], _ i: Int) -> Int? {
        guard s[i] == 0x27, i + 1 < s.count else { return nil }
        func at(_ k: Int, _ options: String) -> Bool {
            i + k < s.count && options.unicodeScalars.contains { $0.value == s[i + k] }
        }
        if at(1, "sS\u{17F}") || at(1, "tT") || at(1, "mM") || at(1, "dD") { return 2 }
        if (at(1, "rR") || at(1, "vV")) && at(2, "eE") { return 3 }
        if at(1, "lL") && at(2, "lL") { return 3 }
        return nil
    }
}
