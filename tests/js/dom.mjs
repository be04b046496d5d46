// A small stand-in for the browser's DOM, enough to run the widgets' page scripts under Node: elements with
// attributes, classes, children, text, inline style, the form properties the scripts read (value, checked,
// selected, disabled, max), events without bubbling, and querySelector(All) over the selectors the scripts use
// (a tag, .class, [attr] and [attr="value"], :checked, compounds of these, and descendants by a space).
// Clicking a disabled element does nothing, as in a browser. innerHTML is written only (simple markup: elements,
// double-quoted attributes, text without entities), which is how the scripts use it.

class ClassList {
  constructor(el) {
    this.el = el;
  }
  get names() {
    return this.el.className.split(/\s+/).filter(Boolean);
  }
  contains(name) {
    return this.names.includes(name);
  }
  toggle(name, on) {
    const has = this.contains(name);
    const want = on === undefined ? !has : Boolean(on);
    if (want && !has) this.el.className = [...this.names, name].join(" ");
    if (!want && has) this.el.className = this.names.filter((n) => n !== name).join(" ");
    return want;
  }
  add(name) {
    this.toggle(name, true);
  }
  remove(name) {
    this.toggle(name, false);
  }
}

export class Text {
  constructor(text) {
    this.nodeType = 3;
    this.parentNode = null;
    this.textContent = String(text);
  }
}

export class Element {
  constructor(tag, ownerDocument) {
    this.nodeType = 1;
    this.tagName = tag.toUpperCase();
    this.ownerDocument = ownerDocument;
    this.attributes = new Map();
    this.childNodes = [];
    this.parentNode = null;
    this.style = {};
    this.listeners = new Map();
    this.classList = new ClassList(this);
    this.disabled = false;
    this.checked = false;
    this.selected = false;
    this.clientWidth = 0;
  }
  get className() {
    return this.getAttribute("class") || "";
  }
  set className(v) {
    this.setAttribute("class", v);
  }
  get id() {
    return this.getAttribute("id") || "";
  }
  set id(v) {
    this.setAttribute("id", v);
  }
  get value() {
    if (this.tagName === "SELECT") {
      const options = this.querySelectorAll("option");
      const chosen = options.find((o) => o.selected) || options[0];
      return chosen ? chosen.value : "";
    }
    return this._value !== undefined ? this._value : this.getAttribute("value") || "";
  }
  set value(v) {
    this._value = String(v);
  }
  getAttribute(name) {
    return this.attributes.has(name) ? this.attributes.get(name) : null;
  }
  setAttribute(name, value) {
    this.attributes.set(name, String(value));
  }
  removeAttribute(name) {
    this.attributes.delete(name);
  }
  hasAttribute(name) {
    return this.attributes.has(name);
  }
  get children() {
    return this.childNodes.filter((n) => n.nodeType === 1);
  }
  get firstChild() {
    return this.childNodes[0] || null;
  }
  get lastChild() {
    return this.childNodes[this.childNodes.length - 1] || null;
  }
  appendChild(node) {
    if (node.parentNode) node.parentNode.childNodes.splice(node.parentNode.childNodes.indexOf(node), 1);
    node.parentNode = this;
    this.childNodes.push(node);
    return node;
  }
  get textContent() {
    return this.childNodes.map((n) => n.textContent).join("");
  }
  set textContent(text) {
    this.childNodes.forEach((n) => (n.parentNode = null));
    this.childNodes = [];
    if (String(text) !== "") this.appendChild(new Text(text));
  }
  set innerHTML(markup) {
    this.textContent = "";
    parseInto(this, markup);
  }
  addEventListener(type, fn) {
    if (!this.listeners.has(type)) this.listeners.set(type, []);
    this.listeners.get(type).push(fn);
  }
  dispatchEvent(event) {
    event.target = event.target || this;
    event.currentTarget = this;
    (this.listeners.get(event.type) || []).forEach((fn) => fn(event));
    return !event.defaultPrevented;
  }
  /** Every element below this one, in document order. */
  descendants() {
    const out = [];
    const walk = (el) =>
      el.children.forEach((c) => {
        out.push(c);
        walk(c);
      });
    walk(this);
    return out;
  }
  querySelectorAll(selector) {
    const steps = selector.trim().split(/\s+/).map(parseCompound);
    return this.descendants().filter((el) => matchesPath(el, steps, this));
  }
  querySelector(selector) {
    return this.querySelectorAll(selector)[0] || null;
  }
  matches(selector) {
    return matchesCompound(this, parseCompound(selector));
  }
}

function parseCompound(text) {
  const m = /^([a-zA-Z][\w-]*)?((?:\.[\w-]+|\[[\w-]+(?:="[^"]*")?\]|:checked)*)$/.exec(text);
  if (!m) throw new Error(`the stand-in DOM does not read the selector ${JSON.stringify(text)}`);
  const parts = m[2].match(/\.[\w-]+|\[[\w-]+(?:="[^"]*")?\]|:checked/g) || [];
  return {
    tag: m[1] ? m[1].toUpperCase() : null,
    classes: parts.filter((p) => p[0] === ".").map((p) => p.slice(1)),
    attrs: parts
      .filter((p) => p[0] === "[")
      .map((p) => {
        const a = /^\[([\w-]+)(?:="([^"]*)")?\]$/.exec(p);
        return [a[1], a[2]];
      }),
    checked: parts.includes(":checked"),
  };
}

function matchesCompound(el, c) {
  if (c.tag && el.tagName.toUpperCase() !== c.tag) return false;
  if (!c.classes.every((k) => el.classList.contains(k))) return false;
  if (!c.attrs.every(([name, value]) => el.hasAttribute(name) && (value === undefined || el.getAttribute(name) === value)))
    return false;
  return !c.checked || el.checked || el.selected;
}

function matchesPath(el, steps, scope) {
  if (!matchesCompound(el, steps[steps.length - 1])) return false;
  let i = steps.length - 2;
  for (let up = el.parentNode; i >= 0 && up && up !== scope; up = up.parentNode) if (matchesCompound(up, steps[i])) i--;
  return i < 0;
}

function parseInto(parent, markup) {
  const doc = parent.ownerDocument;
  const token = /<\/([\w-]+)>|<([\w-]+)((?:\s+[\w-]+="[^"]*")*)\s*>|([^<]+)/g;
  let at = parent;
  let m;
  while ((m = token.exec(markup))) {
    if (m[1]) at = at.parentNode;
    else if (m[2]) {
      const el = at.appendChild(doc.createElement(m[2]));
      for (const a of m[3].matchAll(/([\w-]+)="([^"]*)"/g)) el.setAttribute(a[1], a[2]);
      if (m[2] !== "input") at = el;
    } else at.appendChild(new Text(m[4]));
  }
}

export class Document {
  constructor() {
    this.body = new Element("body", this);
  }
  createElement(tag) {
    return new Element(tag, this);
  }
  createElementNS(namespace, tag) {
    const el = new Element(tag, this);
    el.tagName = tag; // SVG elements keep their case
    el.namespaceURI = namespace;
    return el;
  }
  createTextNode(text) {
    return new Text(text);
  }
  getElementById(id) {
    return this.body.descendants().find((el) => el.id === id) || null;
  }
}

/** An element: h("input", {type: "range", "data-name": "n"}, child, ...); true sets a property (disabled,
 * checked, selected) and its attribute, a string or number sets the attribute, a string child is text. */
export function h(doc, tag, attrs = {}, ...children) {
  const el = doc.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === true) {
      el[name] = true;
      el.setAttribute(name, "");
    } else if (value !== false && value !== null && value !== undefined) el.setAttribute(name, value);
  }
  children.forEach((c) => el.appendChild(typeof c === "string" ? new Text(c) : c));
  return el;
}

/** A user's event on an element: a click on a disabled element does nothing. */
export function fire(el, type, init = {}) {
  if (type === "click" && el.disabled) return false;
  const event = { type, defaultPrevented: false, ...init };
  event.preventDefault = () => {
    event.defaultPrevented = true;
  };
  return el.dispatchEvent(event);
}
