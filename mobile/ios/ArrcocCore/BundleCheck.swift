// contract.json's `files`: every file of the bundle (an .mlpackage's files one by one) with its size
// and sha256, written by `invoke build --target ios` (targets/shared/mobile_contract.py bundle_files).
// A file is trusted only when it is the one recorded, so a bundle mixed from two builds (a copy into
// Resources/ killed half way: some files new, some old) is refused, not run. The hash is the
// platform's (CryptoKit on iOS and macOS); Linux's Foundation has none, so the core tests there pass
// coreutils' sha256sum (CoreTests/Fixtures.swift).
import Foundation
#if canImport(CryptoKit)
import CryptoKit
#endif

/// Lower-case hex SHA-256 of some bytes.
typealias SHA256Hasher = (Data) throws -> String

/// One file of the bundle as contract.json's `files` names it.
struct BundleFile: Decodable {
    let bytes: Int
    let sha256: String
}

enum BundleCheck {
    /// The platform's SHA-256, or nil where it has none (swift-corelibs-foundation on Linux).
    static var platformSHA256: SHA256Hasher? {
        #if canImport(CryptoKit)
        return { data in SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() }
        #else
        return nil
        #endif
    }
}

extension Contract {
    /// `data`, read from the bundle file `name`, when it is the file contract.json's `files` records.
    func checkBundleFile(_ name: String, data: Data, sha256: SHA256Hasher? = BundleCheck.platformSHA256) throws -> Data {
        guard let entry = files[name] else {
            throw AppError.badContract("it does not name \(name): rebuild the app's resources (invoke build --target ios)")
        }
        guard let sha256 else {
            throw AppError.badContract("no SHA-256 on this platform to check \(name) with")
        }
        guard data.count == entry.bytes, try sha256(data) == entry.sha256 else {
            throw AppError.badContract("\(name) differs from it (bytes/sha256: a bundle mixed from two builds?): "
                                       + "rebuild the app's resources (invoke build --target ios)")
        }
        return data
    }

    /// The bundle file `name` in `folder`, read once and checked.
    func checkedData(_ name: String, folder: URL, sha256: SHA256Hasher? = BundleCheck.platformSHA256) throws -> Data {
        try checkBundleFile(name, data: Data(contentsOf: resourceURL(name, folder: folder)), sha256: sha256)
    }

    /// The bundle file `name` in the app's resources, read once and checked.
    func checkedData(_ name: String, bundle: Bundle = .main) throws -> Data {
        guard let folder = bundle.resourceURL?.appendingPathComponent(app.resources_folder) else {
            throw AppError.missingResource(app.resources_folder)
        }
        return try checkedData(name, folder: folder)
    }
}
