// Compile-only declarations of the androidx.test classes GoldenParityTest uses (Google Maven only):
// androidx.test.ext:junit 1.2.1 (android/android-test, ext/junit/java/androidx/test/ext/junit/runners/AndroidJUnit4.java)
// and androidx.test:monitor via runner 1.6.2 (runner/monitor/java/androidx/test/platform/app/InstrumentationRegistry.java).
@file:Suppress("unused", "UNUSED_PARAMETER")

package androidx.test.ext.junit.runners

import org.junit.runner.Description
import org.junit.runner.Runner
import org.junit.runner.notification.RunNotifier

class AndroidJUnit4(klass: Class<*>) : Runner() {
    override fun getDescription(): Description = TODO("compile-only stub")
    override fun run(notifier: RunNotifier): Unit = TODO("compile-only stub")
}
