// arrcoc-tokenize TOKENIZER_JSON TEXT_FILE MAX_LENGTH|none: ArrcocCore's Tokenizer on every line of a
// UTF-8 text file (split on "\n" only; a final "\n" ends the last line), one JSON array of ids per
// line on stdout. Run by `invoke app-tokenize --app ios` (targets/app_tokenize.py); not part of the
// app (project.yml builds ArrcocCore's files into the app, never this target). Exit 2: bad input.
import ArrcocCore
import Foundation

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data((message + "\n").utf8))
    exit(2)
}

let args = CommandLine.arguments
guard args.count == 4 else { fail("usage: arrcoc-tokenize TOKENIZER_JSON TEXT_FILE MAX_LENGTH|none") }
guard let json = FileManager.default.contents(atPath: args[1]) else { fail("cannot read \(args[1])") }
guard let raw = FileManager.default.contents(atPath: args[2]), let text = String(data: raw, encoding: .utf8) else {
    fail("\(args[2]) is not readable UTF-8")
}
let maxLength: Int? = args[3] == "none" ? nil : Int(args[3])
if args[3] != "none" && maxLength == nil { fail("MAX_LENGTH must be a number or none, not \(args[3])") }
let tokenizer: Tokenizer
do { tokenizer = try Tokenizer(json: json, maxLength: maxLength) } catch { fail("\(error)") }
// split on "\n" only: Swift's String.split would also split on "\r\n" (one Character)
var lines = text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false).map { String($0) }
if text.unicodeScalars.last == "\n" { lines.removeLast() }
if text.isEmpty { lines = [] }
var out = ""
for line in lines { out += "[" + tokenizer.encode(line).map(String.init).joined(separator: ",") + "]\n" }
FileHandle.standardOutput.write(Data(out.utf8))
