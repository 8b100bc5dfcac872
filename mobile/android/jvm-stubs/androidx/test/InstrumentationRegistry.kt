// Compile-only declaration of androidx.test:monitor's InstrumentationRegistry (Google Maven only; pulled by
// androidx.test:runner 1.6.2): android/android-test, runner/monitor/java/androidx/test/platform/app/InstrumentationRegistry.java.
@file:Suppress("unused")

package androidx.test.platform.app

import android.app.Instrumentation

object InstrumentationRegistry {
    @JvmStatic
    fun getInstrumentation(): Instrumentation = TODO("compile-only stub")
}
