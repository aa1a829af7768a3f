#pragma once
// Helpers shared by the GUI tests: the demo config's path, a child found by
// objectName (with a warning naming it when missing), and an answer to the next
// modal question the window asks (a test cannot click into exec() otherwise).
#include <QAbstractButton>
#include <QApplication>
#include <QDir>
#include <QFile>
#include <QMessageBox>
#include <QTimer>
#include <QWidget>
#include <QtTest/QTest>
#include <memory>

#include "families/Registration.h"

namespace strata::ui::test {

inline QString sourceFile(const QString& relative) {
  const QByteArray root = qgetenv("STRATA_SOURCE_DIR");
  return QDir(root.isEmpty() ? QString(STRATA_TEST_SOURCE_DIR) : QString::fromLocal8Bit(root)).filePath(relative);
}

inline QString demoConfig() { return sourceFile("configs/demo.yaml"); }

// A writable copy of the demo config at `path` (replacing what is there); empty
// when it could not be made.
inline QString writableDemoCopy(const QString& path) {
  QFile::remove(path);
  if (!QFile::copy(demoConfig(), path)) return QString();
  QFile::setPermissions(path, QFile::ReadOwner | QFile::WriteOwner);
  return path;
}

template <class T>
T* child(QObject* w, const QString& name) {
  T* c = w->findChild<T*>(name);
  if (!c) qWarning("no child %s", qPrintable(name));
  return c;
}

// What the answered dialog showed, filled in when it has been answered.
struct Answer {
  bool answered = false;
  QString text;
};

// Clicks the first of `buttonNames` that the modal dialog `dialogName` has, as
// soon as it is up (polling for 5 s). The returned Answer says whether it came.
inline std::shared_ptr<Answer> answerNext(const QString& dialogName, const QStringList& buttonNames) {
  auto answer = std::make_shared<Answer>();
  auto* timer = new QTimer;
  timer->setInterval(20);
  auto tries = std::make_shared<int>(0);
  QObject::connect(timer, &QTimer::timeout, [=] {
    QWidget* modal = QApplication::activeModalWidget();
    if (modal && modal->objectName() == dialogName) {
      if (auto* box = qobject_cast<QMessageBox*>(modal)) answer->text = box->text() + "\n" + box->informativeText();
      for (const QString& name : buttonNames) {
        if (auto* b = modal->findChild<QAbstractButton*>(name)) {
          answer->answered = true;
          b->click();
          break;
        }
      }
      timer->stop();
      timer->deleteLater();
    } else if (++*tries > 250) {
      timer->stop();
      timer->deleteLater();
    }
  });
  timer->start();
  return answer;
}

inline std::shared_ptr<Answer> answerNext(const QString& dialogName, const QString& buttonName) {
  return answerNext(dialogName, QStringList{buttonName});
}

}  // namespace strata::ui::test

// QTEST_MAIN with the model families registered first, as the strata app's main()
// does (a GUI test that forgot would train nothing, like the app once did).
#define STRATA_GUI_TEST_MAIN(TestObject)     \
  int main(int argc, char** argv) {          \
    strata::families::registerAll();         \
    QApplication app(argc, argv);            \
    app.setAttribute(Qt::AA_Use96Dpi, true); \
    TestObject tc;                           \
    QTEST_SET_MAIN_SOURCE_PATH               \
    return QTest::qExec(&tc, argc, argv);    \
  }
