"""Take a screenshot of `keras-capsules explore` in headless Chromium.

    python docs/images/screenshot_explorer.py OUTPUT.png [MODEL.keras]

Without a model, the explorer serves the capsnet_mnist preset.

Starts the explorer on a free loopback port, moves one slider so that the
picture shows a perturbed reconstruction, saves the page as a PNG and stops
the server. Needs Debian's chromium and chromium-driver and selenium.
"""

import os
import subprocess
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tests._local_http import free_port  # noqa: E402  (the checkout's root, just added)
from tests._local_http import wait_for_http  # noqa: E402


def main(output, model_path=None):
    port = free_port()
    model = [] if model_path is None else [model_path]
    server = subprocess.Popen(
        [sys.executable, "-m", "keras_capsules.cli", "explore", *model, "--port", str(port)],
        env=dict(os.environ, GRADIO_ANALYTICS_ENABLED="False"),
    )
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1400,1100"):
        options.add_argument(argument)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        wait_for_http(port, "/", server, timeout=180)
        driver.get(f"http://127.0.0.1:{port}/")
        time.sleep(5)
        slider = driver.find_element(By.CSS_SELECTOR, "#dim-3 input[type=range]")
        slider.click()
        for _ in range(15):
            slider.send_keys(Keys.ARROW_RIGHT)
        time.sleep(3)
        driver.save_screenshot(output)
        print(output)
    finally:
        driver.quit()
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main(*sys.argv[1:3])
