// ARR-COC relevance demo: pick a photo (or the bundled sample) and a preset query, see which
// patches the relevance realizer attends to. Everything model-specific comes from contract.json.
import SwiftUI

@main
struct ArrcocDemoApp: App {
    var body: some Scene {
        WindowGroup { ContentView() }
    }
}
