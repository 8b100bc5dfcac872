// BERT WordPiece tokenizer (uncased) for all-MiniLM-L6-v2, as an ES module with no dependencies.
//
// It reproduces the Hugging Face `tokenizers` (Rust) pipeline of the model's tokenizer.json, which
// is what Python's pipeline.text_encoder.tokenize runs:
//   BertNormalizer   clean_text (drop NUL, U+FFFD and control/format/private-use/unassigned
//                    characters except \t \n \r; every whitespace character becomes a space),
//                    handle_chinese_chars (a space either side of each CJK ideograph),
//                    strip_accents (NFD, then drop non-spacing marks Mn), lowercase (per character)
//   BertPreTokenizer split on whitespace (removed) and on punctuation (each mark its own word)
//   WordPiece        greedy longest match, "##" continuation, [UNK] for a word that cannot be
//                    split or is longer than 100 characters
//   Template         [CLS] tokens [SEP], truncated to maxLength ids (256: the model's max_seq_length)
// The build's verifier checks it token for token against the Python tokenizer in Chromium.
//
// Unicode versions: the Rust crate classifies characters with older Unicode tables than the
// browser's, so a mark, punctuation or format character assigned since is an ordinary letter to it
// (kept, not split, not stripped). NEWER_THAN_REFERENCE lists those code points (hex ranges): found
// by tokenizing every code point up to U+323FF (and planes 14-15 samples) in context, in Chromium
// 156 and in Python; tests/test_web.py repeats that sweep, and prints the ranges to add when a newer
// browser knows more characters.

const NEWER_THAN_REFERENCE = parseRanges(
  '61d 7fd 890-891 897-89f 8ca-8e2 9fd-9fe a76 afa-aff b55 c04 c3c c77 c84 d00 d3b-d3c d81 eba ece ' +
  '180f 1885-1886 1abf-1add 1ae0-1aeb 1b4e-1b4f 1b7d-1b7f 1df6-1dfb 2e43-2e4f 2e52-2e5d ' +
  'a82c a8c5 a8ff a9bd 10d24-10d27 10d69-10d6e 10eab-10ead 10ed0 10efa-10eff 10f46-10f50 ' +
  '10f55-10f59 10f82-10f89 11070 11073-11074 110c2 110cd 111cf 1123e 11241 1133b 113bb-113c0 ' +
  '113ce 113d0 113d2 113d4-113d5 113d7-113d8 113e1-113e2 11438-1143f 11442-11444 11446 1144b-1144f ' +
  '1145a-1145b 1145d-1145e 11660-1166c 116b9 1182f-11837 11839-1183b 1193b-1193c 1193e ' +
  '11943-11946 119d4-119d7 119da-119db 119e0 119e2 11a01-11a0a 11a33-11a38 11a3b-11a47 11a51-11a56 ' +
  '11a59-11a5b 11a8a-11a96 11a98-11a9c 11a9e-11aa2 11b00-11b09 11b60 11b62-11b64 11b66 11be1 ' +
  '11c30-11c36 11c38-11c3d 11c3f 11c41-11c45 11c70-11c71 11c92-11ca7 11caa-11cb0 11cb2-11cb3 ' +
  '11cb5-11cb6 11d31-11d36 11d3a 11d3c-11d3d 11d3f-11d45 11d47 11d90-11d91 11d95 11d97 11ef3-11ef4 ' +
  '11ef7-11ef8 11f00-11f01 11f36-11f3a 11f40 11f42-11f4f 11f5a 11fff 12ff1-12ff2 13430-13440 ' +
  '13447-13455 1611e-16129 1612d-1612f 16d6d-16d6f 16e97-16e9a 16f4f 16fe2 16fe4 1cf00-1cf2d ' +
  '1cf30-1cf46 1e000-1e006 1e008-1e018 1e01b-1e021 1e023-1e024 1e026-1e02a 1e08f 1e130-1e136 1e2ae ' +
  '1e2ec-1e2ef 1e4ec-1e4ef 1e5ee-1e5ef 1e5ff 1e6e3 1e6e6 1e6ee-1e6ef 1e6f5 1e944-1e94a 1e95e-1e95f '
);

// Characters whose category changed since the reference's tables: still punctuation to it
// (U+166D CANADIAN SYLLABICS CHI SIGN, U+111C9 SHARADA SANDHI MARK), or still a non-spacing mark
// that accent stripping removes (U+1734 HANUNOO SIGN PAMUDPOD, U+1171E AHOM CONSONANT SIGN MEDIAL RA).
const STILL_PUNCTUATION = new Set([0x166D, 0x111C9]);
const STILL_NONSPACING = new Set([0x1734, 0x1171E]);

function parseRanges(text) {
  return text.trim().split(/\s+/).map((r) => {
    const [a, b] = r.split('-').map((x) => parseInt(x, 16));
    return [a, b === undefined ? a : b];
  });
}

function isNewer(cp) {  // binary search in the sorted ranges
  let lo = 0, hi = NEWER_THAN_REFERENCE.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const [a, b] = NEWER_THAN_REFERENCE[mid];
    if (cp < a) hi = mid - 1;
    else if (cp > b) lo = mid + 1;
    else return true;
  }
  return false;
}

const ASCII_PUNCT = /[!-/:-@[-`{-~]/;
const PUNCT = /\p{P}/u;
const WHITESPACE = /\p{White_Space}/u;
const OTHER = /[\p{Cc}\p{Cf}\p{Co}\p{Cs}]/u;  // not Cn: the Rust crate keeps unassigned code points
const NONSPACING_MARK = /\p{Mn}/u;

function isControl(ch) {
  return ch !== '\t' && ch !== '\n' && ch !== '\r' && OTHER.test(ch);
}

function isWhitespace(ch) {
  return ch === '\t' || ch === '\n' || ch === '\r' || WHITESPACE.test(ch);
}

function isPunctuation(ch) {
  return ASCII_PUNCT.test(ch) || PUNCT.test(ch) || STILL_PUNCTUATION.has(ch.codePointAt(0));
}

function isNonspacingMark(ch) {
  const cp = ch.codePointAt(0);
  return (NONSPACING_MARK.test(ch) && !STILL_PUNCTUATION.has(cp)) || STILL_NONSPACING.has(cp);
}

function isChinese(cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
    (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
    (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
    (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

export class BertTokenizer {
  // vocabText: the contents of vocab.txt (one token a line, id = line number)
  constructor(vocabText, options = {}) {
    const { maxLength = 256, maxCharsPerWord = 100, lowercase = true, unk = '[UNK]', cls = '[CLS]',
            sep = '[SEP]', prefix = '##' } = options;
    const lines = vocabText.split('\n');
    if (lines.length && lines[lines.length - 1] === '') lines.pop();
    this.vocab = new Map();
    this.tokens = lines.map((tok) => tok.replace(/\r$/, ''));
    this.tokens.forEach((tok, i) => { if (!this.vocab.has(tok)) this.vocab.set(tok, i); });
    Object.assign(this, { maxLength, maxCharsPerWord, lowercase, prefix });
    for (const [name, tok] of [['unkId', unk], ['clsId', cls], ['sepId', sep]]) {
      if (!this.vocab.has(tok)) throw new Error(`the vocabulary has no ${tok} token`);
      this[name] = this.vocab.get(tok);
    }
  }

  static async load(url, options = {}) {
    const r = await fetch(url);
    if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
    return new BertTokenizer(await r.text(), options);
  }

  normalize(text) {
    let out = '';
    for (const ch of text) {  // code points, not UTF-16 units
      const cp = ch.codePointAt(0);
      if (isNewer(cp)) out += ch;
      else if (cp === 0 || cp === 0xFFFD || isControl(ch)) continue;
      else if (isWhitespace(ch)) out += ' ';
      else if (isChinese(cp)) out += ` ${ch} `;
      else out += ch;
    }
    if (!this.lowercase) return out;
    // strip accents: NFD, then drop non-spacing marks; newer characters pass through untouched
    let stripped = '', run = '';
    const flush = () => {
      for (const ch of run.normalize('NFD')) if (!isNonspacingMark(ch)) stripped += ch;
      run = '';
    };
    for (const ch of out) {
      if (isNewer(ch.codePointAt(0))) { flush(); stripped += ch; } else run += ch;
    }
    flush();
    // per character, like Rust's char::to_lowercase: no final-sigma context rule
    let lower = '';
    for (const ch of stripped) lower += ch.toLowerCase();
    return lower;
  }

  preTokenize(normalized) {
    const words = [];
    let word = '';
    for (const ch of normalized) {
      if (isNewer(ch.codePointAt(0))) {
        word += ch;
      } else if (isWhitespace(ch)) {
        if (word) words.push(word);
        word = '';
      } else if (isPunctuation(ch)) {
        if (word) words.push(word);
        words.push(ch);
        word = '';
      } else {
        word += ch;
      }
    }
    if (word) words.push(word);
    return words;
  }

  wordPiece(word) {
    const chars = Array.from(word);
    if (chars.length > this.maxCharsPerWord) return [this.unkId];
    const ids = [];
    let start = 0;
    while (start < chars.length) {
      let end = chars.length;
      let id;
      while (start < end) {
        const piece = (start > 0 ? this.prefix : '') + chars.slice(start, end).join('');
        id = this.vocab.get(piece);
        if (id !== undefined) break;
        end -= 1;
      }
      if (id === undefined) return [this.unkId];
      ids.push(id);
      start = end;
    }
    return ids;
  }

  // text -> { ids: number[], attentionMask: number[] }: [CLS] ... [SEP], at most maxLength ids
  encode(text) {
    let ids = [];
    for (const word of this.preTokenize(this.normalize(String(text)))) ids.push(...this.wordPiece(word));
    if (ids.length > this.maxLength - 2) ids = ids.slice(0, this.maxLength - 2);
    ids = [this.clsId, ...ids, this.sepId];
    return { ids, attentionMask: ids.map(() => 1) };
  }

  // ids -> token strings (for display and debugging)
  toTokens(ids) { return ids.map((i) => this.tokens[i]); }
}
