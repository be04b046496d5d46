/*
 * The last statement of every widget's script: mount the widget whose element has this id. base.to_html writes
 * the widget's id (checked by StaticWidget: letters, digits, "-" and "_") in place of __ID__.
 * Comments before the code (these) are not written into the pages.
 */
window.__meshplan.mount("__ID__");
