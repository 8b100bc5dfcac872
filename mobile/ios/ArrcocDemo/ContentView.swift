// Photo (library or bundled sample) + a typed query (when contract.json's typed_text is supported) or
// a preset -> relevance heatmap, the strongest cells outlined (every top-K cell on a toggle) and the
// verdict (Verdict.swift: the evidence output through the build's calibration, or "no calibration in
// this folder"). A typed query goes tokenizer -> query encoder ->
// relevance (QueryEncoder.swift), the time of each step shown; the presets stay as the offline fallback.
import PhotosUI
import SwiftUI

@MainActor
final class DemoState: ObservableObject {
    @Published var contract: Contract?
    @Published var photo: UIImage?
    @Published var preset: PresetItem?
    @Published var prediction: Prediction?
    @Published var status = "loading contract.json..."
    @Published var typed = ""
    @Published var timing = ""
    @Published var typedNote = ""
    private var model: RelevanceModel?
    @Published private var encoder: QueryEncoder?
    /// The query the heatmap answers: the last typed one, else the preset.
    private var typedQuery: [Float]?

    var acceptsTypedText: Bool { encoder != nil }

    func start() async {
        do {
            let contract = try Contract.load()
            self.contract = contract
            preset = contract.presets.items.first
            model = try await RelevanceModel(contract: contract)
            status = "model \(model!.entry.file) (\(model!.entry.variant))"
            if contract.presets.items.isEmpty { status = contract.presets.note ?? "no preset queries in contract.json" }
            if contract.typed_text.supported {
                do { encoder = try await QueryEncoder.open(contract: contract) } catch { typedNote = "typed queries off: \(error.localizedDescription)" }
            } else {
                typedNote = "presets only: \(contract.typed_text.why ?? "this build ships no query encoder")"
            }
            loadSample()
        } catch {
            status = error.localizedDescription
        }
    }

    func loadSample() {
        // the sample photo's bytes checked against contract.json's files, then decoded from them
        guard let contract, let data = try? contract.checkedData(contract.app.sample_image) else { return }
        photo = UIImage(data: data)
        run()
    }

    func run() {
        guard let query = typedQuery ?? preset?.embedding else { return }
        _ = predict(query)
    }

    func choosePreset() {
        typedQuery = nil
        timing = ""
        run()
    }

    /// The typed text: tokenize -> encode -> relevance, with each step's milliseconds.
    func runTyped() {
        guard let encoder, !typed.isEmpty else { return }
        do {
            let encoded = try encoder.encode(typed)
            typedQuery = encoded.embedding
            guard let relevanceMs = predict(encoded.embedding) else { return }
            timing = String(format: "%d tokens: tokenize %.1f ms, encode %.1f ms, relevance %.1f ms",
                            encoded.ids.count, encoded.tokenizeMs, encoded.encodeMs, relevanceMs)
        } catch {
            timing = error.localizedDescription
        }
    }

    /// Relevance for the photo and `query`; the milliseconds it took, or nil on an error (shown).
    private func predict(_ query: [Float]) -> Double? {
        guard let contract, let model, let photo else { return nil }
        do {
            let start = Date()
            let image = try RelevanceModel.preprocess(photo, contract: contract, entry: model.entry)
            prediction = try model.predict(image: image, query: query)
            return Date().timeIntervalSince(start) * 1000
        } catch {
            status = error.localizedDescription
            return nil
        }
    }
}

struct ContentView: View {
    @StateObject private var state = DemoState()
    @State private var pickerItem: PhotosPickerItem?
    @State private var showTopK = true
    @State private var showCamera = false

    var body: some View {
        NavigationStack {
            VStack(spacing: 12) {
                if let photo = state.photo, let contract = state.contract {
                    HeatmapView(photo: photo, prediction: state.prediction, grid: contract.model.grid, showTopK: showTopK,
                                outlined: state.prediction.map { Verdict.strongestCells($0, numPatches: contract.model.num_patches,
                                                                                       share: contract.model.strongest_share) } ?? [])
                        .aspectRatio(photo.size.width / max(photo.size.height, 1), contentMode: .fit)
                } else {
                    ProgressView()
                }
                HStack {
                    if state.acceptsTypedText {
                        TextField("Ask about the photo", text: $state.typed)
                            .textFieldStyle(.roundedBorder)
                            .submitLabel(.search)
                            .onSubmit { state.runTyped() }
                    }
                    if let contract = state.contract, !contract.presets.items.isEmpty {
                        Picker("Preset", selection: $state.preset) {
                            ForEach(contract.presets.items, id: \.self) { Text($0.text).tag(Optional($0)) }
                        }
                        .pickerStyle(.menu)
                        .onChange(of: state.preset) { _, _ in state.choosePreset() }
                    }
                }
                if !state.timing.isEmpty { Text(state.timing).font(.caption.monospaced()) }
                if !state.typedNote.isEmpty { Text(state.typedNote).font(.caption).foregroundStyle(.secondary) }
                if let p = state.prediction, let contract = state.contract {
                    Text(Verdict.text(p, try? contract.checkedCalibration())).font(.headline)
                    Text(zip(contract.model.weights_order, p.weights).map { "\($0) \(String(format: "%.2f", $1))" }.joined(separator: "  "))
                        .font(.caption.monospaced())
                }
                Toggle("All top-\(state.contract?.model.top_k ?? 0) patches", isOn: $showTopK)
                HStack {
                    PhotosPicker("Photo…", selection: $pickerItem, matching: .images)
                    if CameraPicker.isAvailable { Button("Camera") { showCamera = true } }
                    Button("Sample") { state.loadSample() }
                }
                Text(state.status).font(.footnote).foregroundStyle(.secondary)
            }
            .padding()
            .navigationTitle("ARR-COC relevance")
        }
        .task { await state.start() }
        .sheet(isPresented: $showCamera) {
            CameraPicker { image in
                state.photo = image
                state.run()
            }
        }
        .onChange(of: pickerItem) { _, item in
            Task {
                if let data = try? await item?.loadTransferable(type: Data.self), let image = UIImage(data: data) {
                    state.photo = image
                    state.run()
                }
            }
        }
    }
}

/// The whole photo, upright at its own aspect (as the model sees it: no crop), relevance as a
/// translucent heatmap on the grid x grid cells laid over all of it, and the cells the answer rests
/// on outlined (`outlined`; every top-K cell when showTopK).
struct HeatmapView: View {
    let photo: UIImage
    let prediction: Prediction?
    let grid: Int
    let showTopK: Bool
    let outlined: [Int]

    var body: some View {
        GeometryReader { geo in
            // the whole photo at its own aspect; the grid covers all of it, so a cell is
            // (width / grid) x (height / grid): not square on a non-square photo
            let fit = min(geo.size.width / photo.size.width, geo.size.height / photo.size.height)
            let shown = CGSize(width: photo.size.width * fit, height: photo.size.height * fit)
            ZStack {
                Image(uiImage: photo).resizable().frame(width: shown.width, height: shown.height)
                if let p = prediction {
                    Canvas { ctx, size in
                        let cw = size.width / CGFloat(grid), ch = size.height / CGFloat(grid)
                        let top = Set(showTopK ? p.topk : outlined)
                        for idx in 0..<min(p.relevance.count, grid * grid) {
                            // relevance[row * grid + col] (contract.model.patch_index)
                            let rect = CGRect(x: CGFloat(idx % grid) * cw, y: CGFloat(idx / grid) * ch, width: cw, height: ch)
                            ctx.fill(Path(rect), with: .color(.red.opacity(0.55 * Double(p.relevance[idx]))))
                            if top.contains(idx) {
                                ctx.stroke(Path(rect.insetBy(dx: 1, dy: 1)), with: .color(.yellow), lineWidth: 1.5)
                            }
                        }
                    }
                    .frame(width: shown.width, height: shown.height)
                }
            }
            .frame(width: geo.size.width, height: geo.size.height)
        }
    }
}
